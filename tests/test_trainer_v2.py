"""Trainer v2 (issue 37): async off-policy with a staleness bound, streaming minibatches, the KL penalty,
and sampler replicas in process, in spawned processes and as Ray actors, on the tiny random model.

Replicas at staleness 0 sample exactly what the trainer's own sampler samples (same seeds, same
transcripts); async runs never train a group older than the bound, count the ones they drop, and a run
killed mid-way (SIGKILL) and rerun trains every group exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tinker

from envsuite import episode_seed
from envsuite.cli import main
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
from envsuite.trainers import ConfigError, StopCause, TrainConfig, TrainingDatum, read_metrics, run_training
from tests.test_trainer_run import HALF_VOCAB, TOY_ID, TURNS_ID, register_toy, sigkill_after_first_checkpoint

STRAGGLER_ID = "test-straggler-v0"


class StragglerEnv(Env):
    """:class:`~tests.test_trainer_run.FirstTokenEnv`'s game, but the episodes of the seeds in
    ``straggle_seeds`` answer only once ``rows_file`` holds ``after_rows`` metric rows (steps trained):
    a group that must arrive stale, whatever the machine's speed."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        rows_file: str = "",
        after_rows: int = 0,
        straggle_seeds: tuple[int, ...] = (),
    ) -> None:
        self.ctx = ctx
        self.rows_file = Path(rows_file)
        self.after_rows = after_rows
        self.straggle = ctx.seed in set(straggle_seeds)
        self.prompt = ctx.renderer.build_generation_prompt([{"role": "user", "content": "Say one word."}])

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        return self.prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        deadline = time.monotonic() + 120
        while self.straggle and time.monotonic() < deadline:
            if self.rows_file.exists() and len(self.rows_file.read_text().splitlines()) >= self.after_rows:
                break
            await asyncio.sleep(0.05)
        hit = bool(action) and action[0] < HALF_VOCAB
        return StepResult.final(
            reward=float(hit),
            stop_reason=StopReason.COMPLETED,
            next_observation=self.prompt.append(tinker.EncodedTextChunk(tokens=list(action))),
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={"correct": float(hit)},
        )


@pytest.fixture(autouse=True)
def _toy_envs() -> Iterator[None]:
    register_toy()
    if STRAGGLER_ID not in {s.id for s in registry.all_specs()}:
        register(STRAGGLER_ID, StragglerEnv, reward_range=(0.0, 1.0), package="tests")
    yield
    for env_id in (TOY_ID, TURNS_ID, STRAGGLER_ID):
        registry.unregister(env_id)


def _config(tmp_path: Path, name: str = "run", **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": TURNS_ID,
        "log_dir": str(tmp_path / name),
        "model": "tiny-random",
        "n_steps": 2,
        "batch_size": 3,
        "group_size": 2,
        "max_tokens": 2,
        "learning_rate": 1e-2,
        "lora_rank": 8,
        "save_every": 10,
        "eval_every": 0,
        "n_transcripts": 6,
        "seed": 0,
    }
    values.update(changes)
    return TrainConfig.from_dict(values)


def _rows(config: TrainConfig) -> list[dict[str, object]]:
    return read_metrics(Path(config.log_dir) / "metrics.jsonl")


def _ledger(config: TrainConfig) -> list[dict[str, object]]:
    path = Path(config.log_dir) / "groups.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _episodes(config: TrainConfig) -> list[str]:
    """Every sampled episode of the run's first and last step, decoded (members are exchangeable)."""
    paths = (Path(config.log_dir) / "transcripts").glob("step*")
    return sorted(p.read_text().split("\n", 1)[1] for p in paths)


SAME_KEYS = ("reward/mean", "reward/std", "tokens/sampled", "entropy", "success")


# --------------------------------------------------------------------------------------------------
# Sampler replicas
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_sampler_run(tmp_path_factory: pytest.TempPathFactory) -> TrainConfig:
    """The reference: the trainer's own sampling client (``samplers=0``), synchronous."""
    register_toy()
    config = _config(tmp_path_factory.mktemp("single"))
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    return config


@pytest.mark.parametrize("executor", ["inprocess", "process", "ray"])
def test_replicas_sample_the_same_trajectories_as_the_single_sampler(
    executor: str, single_sampler_run: TrainConfig, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 37.3: at staleness 0, two replicas (each its own engine, fed the LoRA adapter after each
    step) play every group exactly as the trainer's own sampler did: the same tokens, rewards and
    (to float rounding) logprobs, at the first step and after a weight update."""
    if executor == "ray":
        request.getfixturevalue("ray_session")
    config = _config(tmp_path, samplers=2, executor=executor)
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED, result.message
    rows, reference = _rows(config), _rows(single_sampler_run)
    assert [r["step"] for r in rows] == [0, 1]
    assert int(rows[0]["datums"]) > 0, "the weights must change before the second step"  # type: ignore[call-overload]
    for row, ref in zip(rows, reference, strict=True):
        for key in SAME_KEYS:
            assert row[key] == pytest.approx(ref[key], abs=1e-5), key
        assert row["replicas/alive"] == 2 and row["replicas/lost"] == 0
        assert int(row["replicas/weights_bytes"]) > 0  # type: ignore[call-overload]
    assert _episodes(config) == _episodes(single_sampler_run) and _episodes(config)


def test_full_fine_tune_replicas_get_the_whole_model_and_sample_the_same(tmp_path: Path) -> None:
    """Without LoRA the whole model travels to the replicas after each step; samples are unchanged."""
    single = _config(tmp_path, "single", lora_rank=0)
    replicas = _config(tmp_path, "replicas", lora_rank=0, samplers=1)
    for config in (single, replicas):
        assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    assert int(_rows(single)[0]["datums"]) > 0  # type: ignore[call-overload]
    assert _episodes(replicas) == _episodes(single)
    sent = int(_rows(replicas)[1]["replicas/weights_bytes"])  # type: ignore[call-overload]
    checkpoint = json.loads((Path(single.log_dir) / "checkpoints.jsonl").read_text().splitlines()[-1])
    model_bytes = sum(f.stat().st_size for f in Path(checkpoint["sampler_path"]).iterdir())
    assert sent == pytest.approx(model_bytes, rel=0.01)  # the full model's sampler checkpoint


def test_more_ray_replicas_than_free_cpus_is_a_config_error(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test session's Ray has 2 CPUs and each replica needs one: the third cannot be placed."""
    import envsuite.trainers.async_rl._replicas as replicas

    monkeypatch.setattr(replicas, "START_TIMEOUT_S", 5.0)
    with pytest.raises(ConfigError, match="no node with a free CPU"):
        run_training(_config(tmp_path, samplers=3, executor="ray"), show_progress=False)


def test_killed_replica_processes_lose_no_group_and_the_last_one_stops_the_run_saved(tmp_path: Path) -> None:
    """A replica that dies mid-run: its groups are played again on the other one and counted, and the
    run goes on. When the last one dies too, the run stops (``SAMPLERS_LOST``) with its trained steps
    saved."""
    import psutil

    from envsuite.trainers import Trainer

    config = _config(tmp_path, n_steps=6, samplers=2, executor="process", batch_size=4, save_every=1)
    log = Path(config.log_dir) / "metrics.jsonl"

    async def kill_replicas() -> list[int]:
        killed = []
        for rows in (1, 3):  # one replica after the first step, the other after the third
            while len(read_metrics(log)) < rows:
                await asyncio.sleep(0.02)
            alive = [p for p in psutil.Process().children() if p.pid not in killed and _is_replica(p)]
            alive[0].kill()
            killed.append(alive[0].pid)
        return killed

    async def run() -> tuple[object, list[int]]:
        killer = asyncio.create_task(kill_replicas())
        result = await Trainer(config).run()
        return result, await asyncio.wait_for(killer, 5)

    def _is_replica(proc: psutil.Process) -> bool:
        try:
            return proc.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(proc.cmdline())
        except psutil.Error:
            return False

    result, killed = asyncio.run(run())
    assert len(killed) == 2
    assert getattr(result, "cause", None) is StopCause.SAMPLERS_LOST, getattr(result, "message", "")
    rows = _rows(config)
    assert 3 <= len(rows) < 6 and [r["step"] for r in rows] == list(range(len(rows)))
    assert sum(int(r["replicas/lost"]) for r in rows) >= 1  # type: ignore[call-overload]
    assert all(r["groups/finished"] == 4 and r["groups/failed"] == 0 for r in rows)
    assert getattr(result, "steps_completed", None) == len(rows)
    saved = json.loads((Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert saved["step"] == len(rows)  # a rerun resumes there (resume: tests/test_trainer_run.py)


# --------------------------------------------------------------------------------------------------
# Async off-policy
# --------------------------------------------------------------------------------------------------


def test_async_trains_no_group_staler_than_the_bound_and_counts_the_dropped(tmp_path: Path) -> None:
    """Issue 37.1: the group of batch 0, problem 0 answers only after 3 steps were trained, so it arrives
    at least 2 steps stale with a bound of 1: it is dropped (counted in ``async/dropped_groups`` and in
    ``groups.jsonl``), sampled again with newer weights, and trained then; no trained group is older
    than the bound, and every group of the dataset is trained exactly once."""
    log_dir = tmp_path / "run"
    straggler = episode_seed(0, "train", 0, 0)
    config = _config(
        tmp_path,
        env_id=STRAGGLER_ID,
        env_kwargs={
            "rows_file": str(log_dir / "metrics.jsonl"),
            "after_rows": 3,
            "straggle_seeds": [straggler],
        },
        n_steps=6,
        batch_size=4,
        group_size=2,
        max_tokens=1,
        async_max_steps_off_policy=1,
        n_transcripts=1,
    )
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    rows, ledger = _rows(config), _ledger(config)
    assert [r["step"] for r in rows] == list(range(6))
    stale = [r for r in ledger if r["outcome"] == "stale"]
    assert any(r["slot"] == [0, 0] for r in stale), ledger
    assert all(int(r["staleness"]) > 1 for r in stale)  # type: ignore[call-overload]
    assert sum(int(r["async/dropped_groups"]) for r in rows) == len(stale)  # type: ignore[call-overload]
    taken = [r for r in ledger if r["outcome"] != "stale"]
    assert all(int(r["staleness"]) <= 1 for r in taken)  # type: ignore[call-overload]
    assert all(int(r["async/staleness_max"]) <= 1 for r in rows)  # type: ignore[call-overload]
    assert Counter(tuple(r["slot"]) for r in taken) == Counter(  # type: ignore[arg-type]
        {(b, j): 1 for b in range(6) for j in range(4)}
    )
    assert Counter(r["step"] for r in taken) == {step: 4 for step in range(6)}
    for row in rows:
        histogram = int(row["async/staleness/0"]) + int(row["async/staleness/1"])  # type: ignore[call-overload]
        assert histogram == 4
        assert 0 <= float(row["util/sampler"]) <= 1 and 0 <= float(row["util/trainer"]) <= 1  # type: ignore[arg-type]
    assert any(float(r["util/trainer"]) > 0 for r in rows)  # type: ignore[arg-type]


def test_async_sigkill_then_rerun_trains_every_group_exactly_once(tmp_path: Path) -> None:
    """Issue 37.1: killed (SIGKILL) with groups in flight and queued, the rerun resumes from the last
    checkpoint, keeps the ledger rows before it, samples every group it had not trained again, and ends
    with each of the dataset's groups trained once and each step logged once (async with streaming
    minibatches on two in-process sampler replicas)."""
    config = _config(
        tmp_path,
        env_id=TOY_ID,
        n_steps=10,
        batch_size=3,
        group_size=2,
        max_tokens=2,
        save_every=3,
        async_max_steps_off_policy=2,
        stream_minibatches=3,
        samplers=2,  # in-process replicas: async, streaming and replicas together
    )
    sigkill_after_first_checkpoint(config)
    before = _ledger(config)
    resumed_at = max(
        json.loads(line)["step"]
        for line in (Path(config.log_dir) / "checkpoints.jsonl").read_text().splitlines()
    )
    assert any(int(r["step"]) >= resumed_at for r in before)  # type: ignore[call-overload]  # steps to redo
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 10
    assert [r["step"] for r in _rows(config)] == list(range(10))
    ledger = _ledger(config)
    kept = [r for r in before if int(r["step"]) < resumed_at]  # type: ignore[call-overload]
    assert ledger[: len(kept)] == kept
    taken = [tuple(r["slot"]) for r in ledger if r["outcome"] != "stale"]  # type: ignore[arg-type]
    assert Counter(taken) == Counter({(b, j): 1 for b in range(10) for j in range(3)})


# --------------------------------------------------------------------------------------------------
# Streaming minibatches and the KL penalty
# --------------------------------------------------------------------------------------------------


def test_streaming_minibatches_compute_the_synchronous_update(
    single_sampler_run: TrainConfig, tmp_path: Path
) -> None:
    """Issue 37.2: each minibatch trains as soon as its groups are in; the step's update is the one the
    synchronous loop computes (the second step samples the same replies), in one optimizer step."""
    config = _config(tmp_path, stream_minibatches=3)
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    rows = _rows(config)
    for row, ref in zip(rows, _rows(single_sampler_run), strict=True):
        for key in SAME_KEYS:
            assert row[key] == pytest.approx(ref[key], abs=1e-5), key
        # One group per minibatch here: a minibatch of a constant-reward group has nothing to train.
        assert row["optim_steps"] == 1 and row["stream/minibatches"] == row["groups/used"]
    assert _episodes(config) == _episodes(single_sampler_run)


def test_streaming_with_substeps_takes_one_optimizer_step_per_substep(tmp_path: Path) -> None:
    config = _config(
        tmp_path, env_id=TOY_ID, batch_size=4, num_substeps=2, stream_minibatches=2, max_tokens=1
    )
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    for row in _rows(config):
        if int(row["groups/used"]) == 4:  # type: ignore[call-overload]
            assert row["optim_steps"] == 2 and row["stream/minibatches"] == 4


def test_kl_penalty_shifts_each_action_tokens_advantage_by_its_log_ratio_to_the_reference() -> None:
    """``coef * (mean(d) - d_t)`` with ``d_t = log p_sampler - log p_ref`` on action tokens only; the
    reference's logprobs are read at the right positions (a shift by one would not give back ``d``)."""
    from envsuite.backends.local import LocalSamplingClient
    from envsuite.trainers import KLPenalty

    reference = LocalSamplingClient.load(base_model="tiny-random")
    try:
        tokens = [1, 504, 2910, 30, 17, 88, 4021, 2]
        mask = np.array([0, 0, 0, 1, 1, 0, 1], dtype=np.float32)  # positions predicting tokens 4, 5, 7
        offsets = np.array([0, 0, 0, 0.3, -0.1, 0, 0.5], dtype=np.float32)
        penalty = KLPenalty(reference, coef=0.5, discount=0.0)
        full = tinker.ModelInput.from_ints(tokens)
        ref = np.asarray(reference.compute_logprobs(full).result()[1:], dtype=np.float32)
        sampler = (ref + offsets) * mask
        datum = TrainingDatum(
            tinker.Datum(
                model_input=tinker.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tinker.TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
                    "logprobs": tinker.TensorData.from_numpy(sampler),
                    "advantages": tinker.TensorData.from_numpy(mask * 1.0),
                },
            ),
            mask,
            sampler,
            group_index=0,
        )
        row = asyncio.run(penalty.apply([datum]))
        mean = (0.3 - 0.1 + 0.5) / 3
        assert row["kl_policy_base"] == pytest.approx(mean, abs=1e-4)
        advantages = datum.datum.loss_fn_inputs["advantages"].to_numpy()
        assert advantages == pytest.approx(mask * (1.0 + 0.5 * (mean - offsets)), abs=1e-4)
    finally:
        reference.close()


def test_kl_discount_sums_later_penalties_and_leaves_observation_tokens_alone() -> None:
    from envsuite.trainers import discounted_future_sum

    x = np.array([1.0, 0.0, 2.0, 4.0], dtype=np.float32)
    assert discounted_future_sum(x, 0.5) == pytest.approx([1 + 0 + 0.5 + 0.5, 0 + 1 + 1, 2 + 2, 4])


def test_a_run_with_the_kl_penalty_logs_it_and_starts_at_the_reference(tmp_path: Path) -> None:
    """At step 0 the LoRA adapters are zero, so the policy is the base model, the reference: the KL
    estimate is 0 (to float rounding); after a step it is not."""
    config = _config(tmp_path, kl_penalty_coef=0.1, kl_discount_factor=0.9, n_steps=3)
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    rows = _rows(config)
    assert all("kl_policy_base" in r for r in rows)
    assert abs(float(rows[0]["kl_policy_base"])) < 1e-3  # type: ignore[arg-type]
    assert any(abs(float(r["kl_policy_base"])) > 1e-4 for r in rows[1:])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Settings and the command line
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"async_max_steps_off_policy": -1}, "async_max_steps_off_policy"),
        ({"stream_minibatches": 3, "batch_size": 4}, "does not divide"),
        ({"stream_minibatches": 0}, "stream_minibatches"),
        ({"kl_penalty_coef": -0.1}, "kl_penalty_coef"),
        ({"kl_discount_factor": 1.5}, "kl_discount_factor"),
        ({"kl_reference_checkpoint": "/x"}, "kl_penalty_coef is 0"),
        ({"samplers": -1}, "samplers"),
        ({"samplers": 2, "backend": "tinker"}, "local engine"),
    ],
)
def test_bad_v2_settings_are_refused_with_a_message(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, **changes).validate()


def test_a_kl_reference_that_is_not_a_checkpoint_is_refused_before_any_work(tmp_path: Path) -> None:
    config = _config(tmp_path, kl_penalty_coef=0.1, kl_reference_checkpoint=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="kl_reference_checkpoint"):
        run_training(config, show_progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_v2_flags_reach_the_config_and_a_run_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envsuite.cli._main import build_parser
    from envsuite.cli._train_cmd import config_from_args

    args = build_parser().parse_args(
        [
            "train",
            TOY_ID,
            "--async-max-steps-off-policy",
            "2",
            "--stream-minibatches",
            "2",
            "--kl-penalty",
            "0.05",
            "--kl-discount",
            "0.5",
            "--kl-reference",
            "/ckpt",
            "--samplers",
            "3",
            "--log-dir",
            str(tmp_path / "x"),
        ]
    )
    config = config_from_args(args)
    assert (config.async_max_steps_off_policy, config.stream_minibatches, config.samplers) == (2, 2, 3)
    assert (config.kl_penalty_coef, config.kl_discount_factor, config.kl_reference_checkpoint) == (
        0.05,
        0.5,
        "/ckpt",
    )
    log_dir = tmp_path / "cli"
    code = main(
        [
            "train",
            TOY_ID,
            "--model",
            "tiny-random",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--max-tokens",
            "1",
            "--lora-rank",
            "4",
            "--eval-every",
            "0",
            "--async-max-steps-off-policy",
            "1",
            "--executor",
            "process",
            "--workers",
            "1",
            "--log-dir",
            str(log_dir),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert [r["step"] for r in read_metrics(log_dir / "metrics.jsonl")] == [0, 1]
