"""The GRPO loop end to end on the tiny random model: learning, faults, resume after SIGKILL, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tinker

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    StepResult,
    StopCondition,
    StopReason,
)
from envsuite.registration import register, registry
from envsuite.trainers import PolicyLoss, StopCause, TrainConfig, read_metrics, run_training

TOY_ID = "test-first-token-v0"
HALF_VOCAB = 49152 // 2


class FirstTokenEnv(Env):
    """Learnable by a random model in a few steps: reward 1 when the first sampled token id is in the
    lower half of the vocabulary (a per-token bias the LoRA on the unembedding can learn), else 0.

    Fault knobs: ``fail_seed_mod`` raises in ``step`` for seeds divisible by it; ``hang`` never answers.
    """

    def __init__(self, ctx: EnvContext, *, fail_seed_mod: int = 0, hang: bool = False) -> None:
        self.ctx = ctx
        self.fail = fail_seed_mod > 0 and ctx.seed % fail_seed_mod == 0
        self.hang = hang
        self.prompt = ctx.renderer.build_generation_prompt([{"role": "user", "content": "Say one word."}])

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        return self.prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self.fail:
            raise RuntimeError("toy env failure")
        if self.hang:
            await asyncio.sleep(3600)
        hit = bool(action) and action[0] < HALF_VOCAB
        return StepResult.final(
            reward=float(hit),
            stop_reason=StopReason.COMPLETED,
            next_observation=self.prompt.append(tinker.EncodedTextChunk(tokens=list(action))),
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={"correct": float(hit)},
        )


TURNS_ID = "test-first-tokens-3-turns-v0"


class ThreeTurnFirstTokenEnv(Env):
    """Three turns of :class:`FirstTokenEnv`'s game (reward: share of turns whose first token is in the
    lower half). Each step waits on a worker thread for a random few ms, as a grader or an answerer
    does, so concurrent rollouts finish their turns in an order that changes from run to run."""

    def __init__(self, ctx: EnvContext) -> None:
        self.ctx = ctx
        self.turn = self.hits = 0
        text = f"Say one word about {ctx.seed % 5}."
        self.ob = ctx.renderer.build_generation_prompt([{"role": "user", "content": text}])
        self._timing = random.SystemRandom()  # timing only, never the episode

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        return self.ob, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        await asyncio.to_thread(time.sleep, self._timing.random() * 0.02)
        self.turn += 1
        self.hits += bool(action) and action[0] < HALF_VOCAB
        self.ob = self.ob.append(tinker.EncodedTextChunk(tokens=list(action)))
        stop = self.ctx.renderer.get_stop_sequences()
        if self.turn < 3:
            return StepResult(0.0, False, self.ob, stop, {}, {})
        return StepResult.final(
            self.hits / 3, StopReason.COMPLETED, self.ob, stop, {"correct": self.hits / 3}
        )


def register_toy() -> None:
    if TOY_ID not in {s.id for s in registry.all_specs()}:
        register(TOY_ID, entry_point=FirstTokenEnv, reward_range=(0.0, 1.0), package="tests")
    if TURNS_ID not in {s.id for s in registry.all_specs()}:
        register(TURNS_ID, ThreeTurnFirstTokenEnv, reward_range=(0.0, 1.0), max_turns=3, package="tests")


@pytest.fixture(autouse=True)
def _toy_env() -> Iterator[None]:
    register_toy()
    yield
    registry.unregister(TOY_ID)
    registry.unregister(TURNS_ID)


def _config(tmp_path: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": TOY_ID,
        "log_dir": str(tmp_path / "run"),
        "model": "tiny-random",
        "n_steps": 4,
        "batch_size": 4,
        "group_size": 4,
        "max_tokens": 1,
        "learning_rate": 1e-2,
        "lora_rank": 8,
        "save_every": 2,
        "eval_every": 2,
        "n_test_groups": 4,
        "n_transcripts": 2,
        "seed": 0,
    }
    values.update(changes)
    return TrainConfig.from_dict(values)


def _rows(config: TrainConfig) -> list[dict[str, object]]:
    return read_metrics(Path(config.log_dir) / "metrics.jsonl")


def test_reward_rises_on_a_learnable_toy_env(tmp_path: Path) -> None:
    # lr 0.1 rose to 1.0 by step 3 for seeds 0-2.
    config = _config(tmp_path, n_steps=8, group_size=8, learning_rate=0.1, save_every=8)
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 8
    rewards = [float(r["reward/mean"]) for r in _rows(config)]  # type: ignore[arg-type]
    assert [r["step"] for r in _rows(config)] == list(range(8))
    assert sum(rewards[-2:]) / 2 >= rewards[0] + 0.25, rewards
    log_dir = Path(config.log_dir)
    assert (log_dir / "reward_curve.png").stat().st_size > 1000
    transcripts = sorted((log_dir / "transcripts").glob("*.md"))
    assert transcripts and "Policy reply" in transcripts[0].read_text()
    saved = json.loads((log_dir / "config.json").read_text())
    assert TrainConfig.from_dict(saved) == config
    assert not any("key" in k.lower() for k in saved)


@pytest.mark.parametrize("loss", [loss.value for loss in PolicyLoss])
def test_every_loss_trains(tmp_path: Path, loss: str) -> None:
    """``--loss`` takes every built-in loss: stable_reinforce samples with records and sends provenance
    (refused otherwise), gspo its ratio mask, dro the learner's own logprobs on prompt tokens. (Whether
    a 135M model learns with them is docs/results.md's question; a few steps of a random model at a
    large learning rate are chaotic, so here only that every step trained and saved is checked.)"""
    config = _config(tmp_path, n_steps=3, group_size=4, save_every=3, eval_every=0, loss_fn=loss)
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 3, result.message
    rows = _rows(config)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(np.isfinite(float(r["loss/sum"])) for r in rows)  # type: ignore[arg-type]
    assert sum(int(r["optim_steps"]) for r in rows) >= 1  # type: ignore[call-overload]
    assert result.last_checkpoint is not None and result.last_checkpoint.step == 3


def test_step_metrics_cover_the_documented_fields(tmp_path: Path) -> None:
    config = _config(tmp_path, n_steps=2, max_tokens=3, num_substeps=2, eval_every=1, save_every=1)
    run_training(config, show_progress=False)
    first = _rows(config)[0]
    for key in (
        "reward/mean", "reward/std", "success", "tokens_per_turn", "entropy", "kl_sample_train_v1",
        "kl_sample_train_v2", "time/rollout", "time/assemble", "time/train", "tokens_per_s/rollout",
        "groups/constant_dropped", "groups/failed", "test/reward/mean", "stop/completed", "optim_steps",
    ):  # fmt: skip
        assert key in first, key
    assert first["optim_steps"] == 2
    # The second substep trains on weights one update away from the sampler's: small, not zero.
    assert abs(float(first["kl_sample_train_v1"])) < 0.1  # type: ignore[arg-type]
    assert float(first["kl_sample_train_v2"]) >= 0.0  # type: ignore[arg-type]
    steps = [
        json.loads(line)["step"]
        for line in (Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2]


def test_a_run_looks_its_env_id_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec is resolved by the preflight and carried by the dataset and every group builder."""
    looked_up: list[str] = []
    lookup = registry.spec

    def counting(env_id: str) -> object:
        looked_up.append(env_id)
        return lookup(env_id)

    monkeypatch.setattr(registry, "spec", counting)
    config = _config(tmp_path, n_steps=2, eval_every=1, save_every=2)
    assert run_training(config, show_progress=False).steps_completed == 2
    assert looked_up == [TOY_ID]


def test_full_fine_tune_trains_every_weight_and_resumes(tmp_path: Path) -> None:
    config = _config(tmp_path, n_steps=2, lora_rank=0, learning_rate=1e-4, save_every=1, eval_every=0)
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    rows = _rows(config)
    assert [r["step"] for r in rows] == [0, 1]
    # The sampler of step 1 runs the weights step 0 trained: the two sides agree closely.
    assert abs(float(rows[1]["kl_sample_train_v1"])) < 0.05  # type: ignore[arg-type]
    saved = [
        json.loads(line) for line in (Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()
    ]
    assert [record["step"] for record in saved] == [1, 2]
    assert (Path(saved[-1]["state_path"]) / "model.safetensors").exists()  # every weight, not an adapter
    longer = TrainConfig.from_dict({**config.to_dict(), "n_steps": 3})
    result = run_training(longer, show_progress=False)
    assert result.steps_completed == 3 and [r["step"] for r in _rows(longer)] == [0, 1, 2]


def test_train_unembed_false_leaves_the_lm_head_without_an_adapter(tmp_path: Path) -> None:
    from safetensors import safe_open

    def adapted(config: TrainConfig) -> set[str]:
        run_training(config, show_progress=False)
        record = (Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()[-1]
        path = Path(json.loads(record)["sampler_path"]) / "adapter.safetensors"
        with safe_open(str(path), "pt") as saved:
            return {key.split(".lora_")[0].rsplit(".", 1)[-1] for key in saved.keys()}  # noqa: SIM118

    common = {"n_steps": 1, "save_every": 1, "eval_every": 0}
    assert "lm_head" in adapted(_config(tmp_path / "with", **common))
    modules = adapted(_config(tmp_path / "without", train_unembed=False, **common))
    assert "lm_head" not in modules and {"q_proj", "down_proj"} <= modules


def test_failed_groups_say_why_in_metrics_log_and_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issues 15.19 and 15.16: a failed test group carries its error in the row and in train.log, and a
    run whose output is not a terminal prints a line per step naming the env."""
    config = _config(tmp_path, n_steps=2, env_kwargs={"fail_seed_mod": 2}, eval_every=1, n_test_groups=6)
    run_training(config, show_progress=True)
    rows = _rows(config)
    assert all(int(r["test/failed_groups"]) > 0 for r in rows)  # type: ignore[call-overload]
    assert all("toy env failure" in str(r["test/error/first"]) for r in rows)
    log = (Path(config.log_dir) / "train.log").read_text()
    assert f"GRPO on {TOY_ID}: step 1/2" in log and f"GRPO on {TOY_ID}: step 2/2" in log
    assert "test group(s) failed; first:" in log and "toy env failure" in log
    out = capsys.readouterr()
    assert f"GRPO on {TOY_ID}: step 1/2" in out.out and f"GRPO on {TOY_ID}: step 2/2" in out.out
    assert "test group(s) failed" in out.err


def test_failing_envs_are_dropped_and_counted_and_hangs_time_out(tmp_path: Path) -> None:
    config = _config(tmp_path, n_steps=1, env_kwargs={"fail_seed_mod": 3}, eval_every=0)
    result = run_training(config, show_progress=False)
    row = _rows(config)[0]
    assert result.cause is StopCause.COMPLETED
    assert 0 < int(row["groups/failed"]) < 4  # type: ignore[call-overload]
    assert int(row["groups/finished"]) == 4 - int(row["groups/failed"])  # type: ignore[call-overload]
    assert "toy env failure" in str(row["error/first"])

    hang = _config(
        tmp_path / "hang", n_steps=1, env_kwargs={"hang": True}, rollout_timeout_s=1.0, eval_every=0
    )
    result = run_training(hang, show_progress=False)
    row = _rows(hang)[0]
    assert result.cause is StopCause.COMPLETED and row["stop/rollout_timeout"] == 1.0


def test_nan_loss_stops_with_a_message_and_writes_no_checkpoint(tmp_path: Path) -> None:
    # Two optimizer substeps at an absurd (but finite) rate overflow the weights: the second substep
    # sees a NaN/inf loss or the step makes a weight inf; either way the run stops and saves nothing.
    config = _config(
        tmp_path, n_steps=3, group_size=8, learning_rate=3e37, num_substeps=2, save_every=1, eval_every=0
    )
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.NON_FINITE, result.message
    assert "NaN" in result.message or "inf" in result.message
    assert result.steps_completed == 0 and result.last_checkpoint is None
    assert _rows(config) == []
    assert not (Path(config.log_dir) / "checkpoints.jsonl").exists()


def test_bad_settings_fail_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envsuite.cli import main

    for extra in (
        ["--group-size", "1"],
        ["--batch-size", "6", "--num-substeps", "4"],
        ["--model", "nope-model"],
    ):
        assert (
            main(["train", TOY_ID, "--log-dir", str(tmp_path / "bad"), "--model", "tiny-random", *extra]) == 2
        )
    assert main(["train", "no-such-env", "--log-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("envsuite train: error: ") for line in err), err
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_resuming_a_different_config_is_refused(tmp_path: Path) -> None:
    from envsuite.trainers import ConfigError

    run_training(_config(tmp_path, n_steps=1, eval_every=0), show_progress=False)
    with pytest.raises(ConfigError, match="group_size"):
        run_training(_config(tmp_path, n_steps=2, group_size=2, eval_every=0), show_progress=False)


_CHILD = """
import sys
from tests.test_trainer_run import register_toy
from envsuite.trainers import TrainConfig, run_training
register_toy()
run_training(TrainConfig.from_json(sys.argv[1]), show_progress=False)
"""


def sigkill_after_first_checkpoint(config: TrainConfig) -> None:
    """Train ``config`` (toy envs registered) in a child process and SIGKILL it as soon as a step after
    its first checkpoint is logged: the run dies between two checkpoints, with work past the last one."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path.cwd())}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, config.to_json()], env=env, cwd=Path.cwd())
    log_dir = Path(config.log_dir)
    deadline = time.monotonic() + 300
    killed = False
    while time.monotonic() < deadline and child.poll() is None:
        ckpt = log_dir / "checkpoints.jsonl"
        if ckpt.exists() and ckpt.read_text().strip():
            saved = json.loads(ckpt.read_text().splitlines()[0])["step"]
            if len(_rows(config)) > saved:
                child.send_signal(signal.SIGKILL)
                killed = True
                break
        time.sleep(0.02)
    child.wait(timeout=60)
    assert killed, "the child finished before it could be killed; slow the toy run down"


def test_sigkill_then_rerun_resumes_without_duplicate_or_missing_steps(tmp_path: Path) -> None:
    config = _config(tmp_path, n_steps=10, max_tokens=2, save_every=3, eval_every=0)
    sigkill_after_first_checkpoint(config)
    assert len(_rows(config)) < 10
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 10
    assert [r["step"] for r in _rows(config)] == list(range(10))


def test_a_resumed_step_samples_what_the_uninterrupted_run_sampled(tmp_path: Path) -> None:
    """Issue 15.8: resuming from a checkpoint replays the step's samples, on a model whose weights changed
    and a multi-turn env whose calls arrive in a different order every run.

    The run is resumed from its own checkpoint (the directory is copied and the last checkpoint
    dropped, as a kill just before it would leave it), so both sides start the step from the same
    weights. docs/training.md says what a resume does not replay (float noise of batched sampling).
    """
    import shutil

    config = _config(
        tmp_path,
        env_id=TURNS_ID,
        n_steps=4,
        batch_size=3,
        group_size=4,
        max_tokens=2,
        learning_rate=1e-3,
        save_every=1,
        eval_every=0,
        n_transcripts=12,
        temperature=1.0,
    )
    run_training(config, show_progress=False)
    rows = _rows(config)
    assert all(int(r["datums"]) > 0 for r in rows[:3]), "the weights must change before the resumed step"  # type: ignore[call-overload]
    log_dir = Path(config.log_dir)
    uninterrupted = tmp_path / "uninterrupted"
    shutil.copytree(log_dir, uninterrupted)
    lines = (log_dir / "checkpoints.jsonl").read_text().splitlines()
    (log_dir / "checkpoints.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # back to step 3
    for transcript in (log_dir / "transcripts").glob("step00003_*"):
        transcript.unlink()
    run_training(config, show_progress=False)
    again = _rows(config)
    assert [r["step"] for r in again] == [0, 1, 2, 3]
    assert again[:3] == rows[:3]
    for key in ("reward/mean", "reward/std", "tokens/sampled", "success", "entropy"):
        assert again[3][key] == pytest.approx(rows[3][key], abs=1e-6), key

    def replies(log_dir: Path) -> list[str]:
        bodies = [p.read_text().split("\n", 1)[1] for p in (log_dir / "transcripts").glob("step00003_*")]
        return sorted(bodies)  # members of a group are exchangeable; compare the episodes as a set

    assert replies(log_dir) == replies(uninterrupted) and replies(log_dir)


def test_the_previous_sampling_client_is_let_go_before_the_next_snapshot_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every sampling snapshot holds a copy of the model (540 MB for SmolLM2): two alive at once is a
    # model's worth of peak memory per refresh.
    import gc
    import weakref

    from envsuite.backends.local import LocalSamplingClient, LocalTrainingClient

    made: list[weakref.ref[LocalSamplingClient]] = []
    alive_at_snapshot: list[int] = []
    snapshot = LocalTrainingClient.save_weights_and_get_sampling_client

    def counted(self: LocalTrainingClient, *args: object, **kwargs: object) -> object:
        gc.collect()  # only strong references count here, not cycles awaiting the collector
        alive_at_snapshot.append(sum(ref() is not None for ref in made))
        future = snapshot(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(weakref.ref(future.result()))
        return future

    monkeypatch.setattr(LocalTrainingClient, "save_weights_and_get_sampling_client", counted)
    result = run_training(_config(tmp_path, n_steps=3, save_every=3, eval_every=0), show_progress=False)
    assert result.cause is StopCause.COMPLETED
    assert len(alive_at_snapshot) == 4  # the first client, then one per trained step
    assert alive_at_snapshot == [0, 0, 0, 0]
