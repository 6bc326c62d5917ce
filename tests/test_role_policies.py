"""A training run with a policy per role (issue 59 items 1-2), on the local backend and the tiny random model:
each policy its own adapter, optimizer, advantages, datums, checkpoints and metrics; a frozen policy never
changes; a run killed between checkpoints resumes every policy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker

from envsuite import CatalogGroupBuilder
from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    StepResult,
    StopCondition,
    StopReason,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from envsuite.registration import register, registry
from envsuite.trainers import (
    ConfigError,
    StopCause,
    TrainConfig,
    load_preset,
    read_eval_rows,
    read_metrics,
    run_training,
)

TOY_ID = "test-two-seat-first-token-v0"
HALF_VOCAB = 49152 // 2


class SeatFirstTokenEnv(Env):
    """One seat of a toy two-seat game whose seats want opposite things: seat 0 earns 1 when its first
    token id is in the lower half of the vocabulary, seat 1 when it is in the upper half. A random
    model's replies differ within a group, so both seats' advantages carry signal."""

    def __init__(self, ctx: EnvContext) -> None:
        self.ctx = ctx
        self.seat = 0
        self.prompt = ctx.renderer.build_generation_prompt([{"role": "user", "content": "Say one word."}])

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        return self.prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        low = bool(action) and action[0] < HALF_VOCAB
        hit = low if self.seat == 0 else not low
        return StepResult.final(
            reward=float(hit),
            stop_reason=StopReason.COMPLETED,
            next_observation=self.prompt.append(tinker.EncodedTextChunk(tokens=list(action))),
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={f"seat{self.seat}_hit": float(hit)},
        )


@dataclass(frozen=True)
class TwoSeatBuilder(CatalogGroupBuilder):
    """Member ``i`` plays seat ``i % 2``, as ``SelfPlayGroupBuilder``'s members do."""

    async def make_envs(self) -> Sequence[Env]:
        envs = [self.make_env() for _ in range(self.group_size)]
        for member, env in enumerate(envs):
            assert isinstance(env, SeatFirstTokenEnv)
            env.seat = member % 2
        return envs


def register_toy() -> None:
    if TOY_ID not in {s.id for s in registry.all_specs()}:
        register(
            TOY_ID,
            entry_point=SeatFirstTokenEnv,
            group_builder_entry_point=TwoSeatBuilder,
            reward_range=(0.0, 1.0),
            package="tests",
        )


@pytest.fixture(autouse=True)
def _toy_env() -> Iterator[None]:
    register_toy()
    yield
    registry.unregister(TOY_ID)


POLICIES = {"low": {"seats": [0]}, "high": {"seats": [1], "trainable": False}}


def _config(tmp_path: Path, **changes: object) -> TrainConfig:
    values: dict[str, object] = {
        "env_id": TOY_ID,
        "log_dir": str(tmp_path / "run"),
        "model": "tiny-random",
        "n_steps": 2,
        "batch_size": 2,
        "group_size": 8,
        "max_tokens": 1,
        "learning_rate": 5e-2,
        "lora_rank": 4,
        "save_every": 1,
        "eval_every": 0,
        "n_transcripts": 2,
        "policies": POLICIES,
    }
    values.update(changes)
    return TrainConfig.from_dict(values)


def _rows(config: TrainConfig) -> list[dict[str, object]]:
    return read_metrics(Path(config.log_dir) / "metrics.jsonl")


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _adapter(sampler_path: object) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(Path(str(sampler_path)) / "adapter.safetensors"))


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_two_policies_train_apart_and_the_frozen_one_never_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envsuite.backends.local._shared_bases import SharedBases

    engines: list[int] = []
    variant_of = SharedBases.variant_of

    def recorded(self: SharedBases, *args: Any, **kwargs: Any) -> Any:
        shared = variant_of(self, *args, **kwargs)
        engines.append(id(shared[0]) if shared is not None else 0)
        return shared

    monkeypatch.setattr(SharedBases, "variant_of", recorded)
    config = _config(tmp_path)
    result = run_training(config, show_progress=False)
    # Both policies' samplers are adapters of one engine (multi-adapter sampling, backends/local/_shared_bases).
    assert len(engines) >= 3 and 0 not in engines and len(set(engines[:2])) == 1
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 2, result.message
    log_dir = Path(config.log_dir)
    rows = _rows(config)
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        assert row["policy/low/trainable"] == 1 and row["policy/high/trainable"] == 0
        assert int(row["policy/low/datums"]) > 0 and "policy/low/loss/sum" in row  # type: ignore[call-overload]
        assert "policy/high/loss/sum" not in row and "policy/high/lr" not in row
        assert row["policy/low/episodes"] == row["policy/high/episodes"] == 8  # 2 groups x 4 members each
        assert "policy/low/env/seat0_hit" in row and "policy/high/env/seat1_hit" in row
        assert "policy/low/env/seat1_hit" not in row  # a seat's episodes reach its own policy only
    # Each policy its own checkpoint files, written at every step, and the run's line naming both.
    low = _records(log_dir / "policies" / "low" / "checkpoints.jsonl")
    high = _records(log_dir / "policies" / "high" / "checkpoints.jsonl")
    assert [r["step"] for r in low] == [r["step"] for r in high] == [1, 2]
    assert low[-1]["state_path"] != high[-1]["state_path"]
    run_line = _records(log_dir / "policy_checkpoints.jsonl")[-1]
    assert run_line["step"] == 2 and set(run_line["policies"]) == {"low", "high"}  # type: ignore[arg-type]
    assert set(result.policy_checkpoints) == {"low", "high"}
    # The trained adapter moved at every step; the frozen one is bit-for-bit its initial self.
    assert not _same(_adapter(low[0]["sampler_path"]), _adapter(low[1]["sampler_path"]))
    assert _same(_adapter(high[0]["sampler_path"]), _adapter(high[1]["sampler_path"]))


def _episode(reward: float) -> Trajectory:
    ob = tinker.ModelInput.from_ints([1, 2, 3])
    ac = TokensWithLogprobs(tokens=[5, 6], maybe_logprobs=[-1.0, -1.0])
    return Trajectory([Transition(ob, ac, reward, True)], ob, StopReason.COMPLETED)


def test_a_policy_starts_from_another_runs_trained_role(tmp_path: Path) -> None:
    """``init_from``: the frozen ``high`` of a second run plays with the weights the first run trained for
    ``low`` (train one role against the other's trained policy); a checkpoint of another base is refused."""
    first = _config(tmp_path / "first", n_steps=1, policies={"low": {"seats": [0]}, "high": {"seats": [1]}})
    assert run_training(first, show_progress=False).cause is StopCause.COMPLETED
    trained = _records(Path(first.log_dir) / "policies" / "low" / "checkpoints.jsonl")[-1]
    policies = {
        "low": {"seats": [0]},
        "high": {"seats": [1], "trainable": False, "init_from": trained["state_path"]},
    }
    second = _config(tmp_path / "second", n_steps=1, policies=policies)
    assert run_training(second, show_progress=False).cause is StopCause.COMPLETED
    [high] = _records(Path(second.log_dir) / "policies" / "high" / "checkpoints.jsonl")
    assert _same(_adapter(high["sampler_path"]), _adapter(trained["sampler_path"]))
    recorded = json.loads((Path(second.log_dir) / "config.json").read_text())
    assert json.dumps(trained["state_path"]) in json.dumps(recorded)  # the run records where it started
    other = _config(tmp_path / "other", n_steps=1, model="smollm2-135m-instruct", policies=policies)
    with pytest.raises(Exception, match="trained from"):
        run_training(other, show_progress=False)


def test_a_frozen_role_draws_each_groups_opponent_from_its_pool(tmp_path: Path) -> None:
    """``pool``: a frozen role's seats of each group are played by one member of its own weights and the
    saved states listed, drawn by the group's sampling seed; the rows count each member's groups."""
    first = _config(tmp_path / "first", n_steps=2, policies={"low": {"seats": [0]}, "high": {"seats": [1]}})
    assert run_training(first, show_progress=False).cause is StopCause.COMPLETED
    saved = [
        r["state_path"] for r in _records(Path(first.log_dir) / "policies" / "high" / "checkpoints.jsonl")
    ]
    policies = {"low": {"seats": [0]}, "high": {"seats": [1], "trainable": False, "pool": saved}}
    second = _config(tmp_path / "second", n_steps=2, batch_size=4, policies=policies)
    assert run_training(second, show_progress=False).cause is StopCause.COMPLETED
    rows = _rows(second)
    counts = [[int(row[f"policy/high/pool/{m}/groups"]) for m in range(3)] for row in rows]  # type: ignore[call-overload]
    assert all(sum(c) == 4 for c in counts), counts  # every group drew one member
    assert all(sum(c[m] for c in counts) > 0 for m in range(3)), counts  # each member played some group
    assert "policy/low/pool/0/groups" not in rows[0]  # a policy without a pool draws nothing
    recorded = json.loads((Path(second.log_dir) / "config.json").read_text())
    assert json.dumps(saved) in json.dumps(recorded)


def test_a_policy_on_its_own_base_model(tmp_path: Path) -> None:
    """``model``: the frozen ``high`` samples from SmolLM2-135M while ``low`` trains on the run's tiny model
    (the two share SmolLM2's tokenizer); its checkpoints record its own base. A base model with another
    tokenizer is refused."""
    from envsuite.trainers._role_loop import check_same_tokenizer

    policies = {
        "low": {"seats": [0]},
        "high": {"seats": [1], "trainable": False, "model": "smollm2-135m-instruct"},
    }
    config = _config(tmp_path, n_steps=1, policies=policies)
    assert run_training(config, show_progress=False).cause is StopCause.COMPLETED
    base_of = {}
    for name in ("low", "high"):
        [record] = _records(Path(config.log_dir) / "policies" / name / "checkpoints.jsonl")
        meta = json.loads((Path(str(record["sampler_path"])) / "envsuite_checkpoint.json").read_text())
        base_of[name] = meta["base_model"]
    assert base_of == {"low": "tiny-random", "high": "smollm2-135m-instruct"}, base_of
    from transformers import AutoTokenizer

    from envsuite import RendererConfig

    other = AutoTokenizer.from_pretrained(RendererConfig("tiny-random").build().tokenizer.name_or_path)  # type: ignore[attr-defined]
    other.add_tokens(["<not-in-the-run's-vocabulary>"])
    with pytest.raises(ConfigError, match="another tokenizer"):
        check_same_tokenizer(config, config.roles.policies[1], other)


def test_advantages_are_centred_within_each_seat_of_a_group() -> None:
    from envsuite.trainers._role_rollouts import SeatedGroup, assemble_for_policy

    # Members alternate seats; seat 0 scores 1, 0, 1 and seat 1 scores 0, 0, 1 (a mean of 1/2 over all six).
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    group = TrajectoryGroup([_episode(r) for r in rewards], [0.0] * 6, [{} for _ in rewards])
    seated = SeatedGroup(group, (0, 1, 0, 1, 0, 1))
    asker = assemble_for_policy([seated], [0], scale_by_std=False, version=0).assembled
    assert asker.advantages == pytest.approx([1 / 3, -2 / 3, 1 / 3])  # against the seat's mean, 2/3
    assert asker.n_groups_used == 1 and len(asker.datums_D) == 3
    answerer = assemble_for_policy([seated], [1], scale_by_std=False, version=0).assembled
    assert answerer.advantages == pytest.approx([-1 / 3, -1 / 3, 2 / 3])
    # One policy on both seats still compares each seat with itself: two groups, each centred.
    both = assemble_for_policy([seated], [0, 1], scale_by_std=False, version=0).assembled
    assert both.n_groups_used == 2 and sum(both.advantages) == pytest.approx(0.0)
    assert both.advantages == pytest.approx([1 / 3, -2 / 3, 1 / 3, -1 / 3, -1 / 3, 2 / 3])
    # A seat whose members all scored the same carries no signal: dropped, counted.
    flat = SeatedGroup(TrajectoryGroup([_episode(1.0)] * 2, [0.0] * 2, [{}, {}]), (0, 1))
    assert assemble_for_policy([flat], [0], scale_by_std=False, version=0).assembled.n_groups_constant == 1


def test_bad_policy_settings_fail_before_any_model_loads(tmp_path: Path) -> None:
    cases = [
        ({"a": {"seats": [0]}, "b": {"seats": [0, 1]}}, "claimed by two policies"),
        (
            {"a": {"seats": [0], "trainable": False}, "b": {"seats": [1], "trainable": False}},
            "every policy is frozen",
        ),
        ({"a": {"seats": []}, "b": {"seats": [1]}}, "seats is empty"),
        ({"a b": {"seats": [0]}}, "policy name"),
        ({"a": {"seats": [0], "lr": 1}}, "unknown keys"),
        ({"a": {"seats": [0]}}, r"seat\(s\) \[1\], which no policy plays"),
        ({"a": {"seats": [0], "pool": ["x"]}, "b": {"seats": [1]}}, "pool needs trainable = false"),
        ({"a": {"seats": [0]}, "b": {"seats": [1], "trainable": False, "pool": "x"}}, "list of checkpoint"),
    ]
    for policies, message in cases:
        with pytest.raises(ConfigError, match=message):
            run_training(_config(tmp_path, policies=policies), show_progress=False)
    with pytest.raises(ConfigError, match="synchronously"):
        _config(tmp_path, async_max_steps_off_policy=1).validate()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_resumed_run_restores_every_policy_and_its_optimizer(tmp_path: Path) -> None:
    """Simulated crash after step 1: the run's last checkpoint line is dropped (a kill after the policies
    saved step 2 but before the run's line), so the rerun starts at step 1 from both policies' step-1
    weights and Adam moments, and replays step 1 as the uninterrupted run played it."""
    config = _config(
        tmp_path, policies={"low": {"seats": [0]}, "high": {"seats": [1], "learning_rate": 2e-2}}
    )
    run_training(config, show_progress=False)
    log_dir = Path(config.log_dir)
    uninterrupted = tmp_path / "uninterrupted"
    shutil.copytree(log_dir, uninterrupted)
    run_file = log_dir / "policy_checkpoints.jsonl"
    run_file.write_text(run_file.read_text().splitlines()[0] + "\n")
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 2, result.message
    rows, before = _rows(config), read_metrics(uninterrupted / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1] and rows[0] == before[0]
    for key in ("reward/mean", "policy/low/reward/mean", "policy/high/reward/mean", "tokens/sampled"):
        assert rows[1][key] == pytest.approx(before[1][key], abs=1e-6), key
    for name in ("low", "high"):
        records = _records(uninterrupted / "policies" / name / "checkpoints.jsonl")
        again = _records(log_dir / "policies" / name / "checkpoints.jsonl")[-1]
        first, before_step = records[-1], records[-2]
        assert again["step"] == first["step"] == 2 and again["state_path"] != first["state_path"]
        resumed, straight = _adapter(again["sampler_path"]), _adapter(first["sampler_path"])
        start = _adapter(before_step["sampler_path"])
        assert resumed.keys() == straight.keys() == start.keys()
        # Measured against step 2's own update: fresh Adam moments take a step of about the learning rate
        # on every weight in a different direction (the gap is about the update's size), while a restored
        # optimizer replays the update; what remains comes from the rerun's sampler logprobs differing in
        # the last bits (requests overlap differently between runs and workers), which Adam can amplify
        # on near-zero gradients, so single weights are not compared to a fixed bound.
        gap = _norm({k: resumed[k] - straight[k] for k in resumed})
        update = _norm({k: straight[k] - start[k] for k in straight})
    assert gap < 0.1 * update, (
        f"{name}: resumed is {gap:.2e} from the straight run; its step was {update:.2e}"
    )


def _norm(tensors: dict[str, np.ndarray]) -> float:
    return float(np.sqrt(sum(float(np.sum(t.astype(np.float64) ** 2)) for t in tensors.values())))


_CHILD = """
import sys
from tests.test_role_policies import register_toy
from envsuite.trainers import TrainConfig, run_training
register_toy()
run_training(TrainConfig.from_json(sys.argv[1]), show_progress=False)
"""


def test_sigkill_between_checkpoints_then_rerun_resumes_both_policies(tmp_path: Path) -> None:
    """A child process trains and is SIGKILLed as soon as a step past its first complete checkpoint is
    logged; the rerun resumes there with both policies and ends with every step exactly once."""
    config = _config(
        tmp_path, n_steps=6, save_every=2, policies={"low": {"seats": [0]}, "high": {"seats": [1]}}
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path.cwd())}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, config.to_json()], env=env, cwd=Path.cwd())
    run_file = Path(config.log_dir) / "policy_checkpoints.jsonl"
    deadline, killed = time.monotonic() + 600, False
    while time.monotonic() < deadline and child.poll() is None:
        if run_file.exists() and run_file.read_text().strip():
            saved = json.loads(run_file.read_text().splitlines()[0])["step"]
            if len(_rows(config)) > saved:
                child.send_signal(signal.SIGKILL)
                killed = True
                break
        time.sleep(0.02)
    child.wait(timeout=60)
    assert killed, "the child finished before it could be killed"
    assert len(_rows(config)) < 6
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 6, result.message
    assert [r["step"] for r in _rows(config)] == list(range(6))
    log = (Path(config.log_dir) / "train.log").read_text()
    assert "resuming at step 2" in log or "resuming at step 4" in log
    assert _records(run_file)[-1]["step"] == 6
    for name in ("low", "high"):
        steps = [r["step"] for r in _records(Path(config.log_dir) / "policies" / name / "checkpoints.jsonl")]
        assert steps == [2, 4, 6], steps  # a record the resume saved again is not kept twice


def test_the_two_policy_preset_trains_both_roles_of_the_duel(tmp_path: Path) -> None:
    """The shipped preset, shrunk to one step of the tiny model: each role's own game numbers reach its
    policy (the asker's questions and found secret, the answerer's truthful share)."""
    preset = load_preset("twenty-questions-duel-two-policies")
    config = preset.config(
        str(tmp_path / "duel"), model="tiny-random", n_steps=1, batch_size=1, group_size=4, max_tokens=8,
        eval_every=1, n_test_groups=2, lora_rank=4,
    )  # fmt: skip
    assert {p.name for p in config.roles.policies} == {"asker", "answerer"}
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED, result.message
    [row] = _rows(config)
    assert row["policy/asker/episodes"] == row["policy/answerer/episodes"] == 2
    assert "policy/asker/env/found_secret" in row and "policy/asker/env/truthful_share" not in row
    assert "policy/answerer/env/truthful_share" in row and "policy/answerer/env/found_secret" not in row
    # Held-out: each test problem is one game per role against the scripted other seat; each policy's own
    # numbers, and every episode row names its seat and policy (compare_held_out(policy=...) reads them).
    assert row["test/episodes"] == 4 and row["test/failed_groups"] == 0
    assert row["policy/asker/test/episodes"] == row["policy/answerer/test/episodes"] == 2
    assert "policy/answerer/test/env/truthful_share" in row and "policy/asker/test/env/found_secret" in row
    episodes = read_eval_rows(Path(config.log_dir))
    assert sorted((e["seat"], e["policy"]) for e in episodes) == [(0, "asker")] * 2 + [(1, "answerer")] * 2
    # The preset constrains each seat's replies to its legal moves, through either policy's sampler.
    assert row["policy/asker/env/invalid_moves"] == row["policy/answerer/env/invalid_moves"] == 0
