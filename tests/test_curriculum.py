"""Multi-env runs and the adaptive curriculum: weighted mixes of catalog ids (slots, batches, per-env
metrics and held-out sets), rungs moving up and down with the running success (unit and in real runs on
the tiny model), resume, config files and the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker

import envsuite
from envsuite import Rung, make_mixture_dataset_builder, round_robin_slots
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
    Curriculum,
    CurriculumState,
    TrainConfig,
    compare_held_out,
    read_eval_rows,
    read_metrics,
    resolve_run_envs,
    run_training,
)
from tests.conftest import TEST_MODEL

TOY_ID = "test-rungs-v0"
VOCAB = 49152
ALWAYS, NEVER = VOCAB, 0


class ThresholdEnv(Env):
    """One turn; success when the first sampled token id is under ``threshold`` (so rung difficulty is
    exact: ``VOCAB`` always succeeds, 0 never does, whatever the model samples)."""

    def __init__(self, ctx: EnvContext, *, threshold: int = VOCAB // 2) -> None:
        self.ctx = ctx
        self.threshold = threshold
        self.prompt = ctx.renderer.build_generation_prompt([{"role": "user", "content": "Say a word."}])

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        return self.prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        hit = bool(action) and action[0] < self.threshold
        return StepResult.final(
            reward=float(hit),
            stop_reason=StopReason.COMPLETED,
            next_observation=self.prompt,
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={"success": float(hit)},
        )


@pytest.fixture
def rung_env() -> Iterator[str]:
    rungs = tuple(Rung({"threshold": t}, label=f"threshold {t}") for t in (ALWAYS, ALWAYS, NEVER))
    register(TOY_ID, f"{__name__}:ThresholdEnv", reward_range=(0.0, 1.0), rungs=rungs, family="toy")
    yield TOY_ID
    registry.unregister(TOY_ID)


# -- mixtures ----------------------------------------------------------------------------------


def test_round_robin_gives_each_source_its_share_interleaved() -> None:
    slots = round_robin_slots([2.0, 1.0, 1.0], 400)
    assert [slots.count(s) for s in range(3)] == [200, 100, 100]
    assert slots[:4] == [0, 1, 2, 0], "interleaved, not in blocks"
    for prefix in range(1, 400):  # over any prefix, within one slot of the exact share
        assert abs(slots[:prefix].count(0) - prefix / 2) <= 1
    with pytest.raises(ValueError, match="positive"):
        round_robin_slots([1.0, 0.0], 3)


def test_a_mixture_dataset_is_deterministic_labelled_and_pickles() -> None:
    builder = make_mixture_dataset_builder(
        {"arithmetic_easy": 3, "reasoning_gym/chain_sum": 1},
        batch_size=8,
        group_size=2,
        n_batches=4,
        n_test_groups=3,
        model=TEST_MODEL,
        env_kwargs={"reasoning_gym/chain_sum": {"rung": 0}},
    )
    train, test = asyncio.run(builder())
    tags = [[g.logging_tags()[0] for g in train.get_batch(i)] for i in range(4)]
    assert all(batch.count("arithmetic_easy") == 6 for batch in tags)
    assert (
        test is not None
        and [g.logging_tags()[0] for g in test.get_batch(0)]
        == ["arithmetic_easy"] * 3 + ["reasoning_gym/chain_sum"] * 3
    )
    clone = pickle.loads(pickle.dumps(train))
    first, again = train.get_batch(2), clone.get_batch(2)
    assert [(g.env_id, g.seed, dict(g.env_kwargs)) for g in first] == [  # type: ignore[attr-defined]
        (g.env_id, g.seed, dict(g.env_kwargs))
        for g in again  # type: ignore[attr-defined]
    ]
    chain = next(g for g in first if g.logging_tags()[0] == "reasoning_gym/chain_sum")
    assert chain.env_kwargs["max_digits"] == 1, "a mix's env keeps its own keyword arguments"  # type: ignore[attr-defined]
    with pytest.raises(IndexError):
        train.get_batch(4)


def test_a_runs_envs_come_from_a_selection_with_weights_and_kwargs(tmp_path: Path) -> None:
    config = TrainConfig(
        env_id="family:math,!math_easy",
        log_dir=str(tmp_path),
        env_weights={"arithmetic": 2},
        env_kwargs={"arithmetic_easy": {"digits": 2}},
    )
    envs = {e.spec.id: e for e in resolve_run_envs(config)}
    assert set(envs) == {"arithmetic-v0", "arithmetic_easy-v0", "math-v0"}
    assert envs["arithmetic-v0"].weight == 2 and envs["math-v0"].weight == 1
    assert envs["arithmetic_easy-v0"].kwargs == {"digits": 2} and envs["math-v0"].kwargs == {}
    for bad, match in (
        ({"env_weights": {"chess": 1}}, "not one of the run's envs"),
        ({"env_weights": {"math": 0}}, "weights must be > 0"),
        ({"env_id": "tag:no-such-tag"}, "no available env matches"),
        ({"env_id": "textarena/Chess-v0"}, "cannot run here"),
    ):
        with pytest.raises(ConfigError, match=match):
            resolve_run_envs(TrainConfig(**{"env_id": "family:math", "log_dir": str(tmp_path), **bad}))  # type: ignore[arg-type]
    # One env: env_kwargs are that env's, as always.
    assert resolve_run_envs(TrainConfig(env_id="arithmetic", log_dir="x", env_kwargs={"digits": 1}))[
        0
    ].kwargs == {"digits": 1}


# -- the curriculum, unit by unit ----------------------------------------------------------------


def _group(successes: list[bool]) -> TrajectoryGroup:
    trajectories = []
    for hit in successes:
        transition = Transition(
            ob=tinker.ModelInput.from_ints([1]),
            ac=TokensWithLogprobs(tokens=[2], maybe_logprobs=[0.0]),
            reward=float(hit),
            episode_done=True,
            metrics={"success": float(hit)},
        )
        trajectories.append(Trajectory(transitions=[transition], final_ob=tinker.ModelInput.from_ints([1])))
    return TrajectoryGroup(trajectories, [0.0] * len(successes), [{} for _ in successes])


def test_rungs_move_up_on_success_and_down_on_failure(rung_env: str) -> None:
    spec = envsuite.spec(rung_env)
    state = CurriculumState(Curriculum(promote_at=0.75, demote_below=0.25, window=2), [spec])
    builders = [
        envsuite.make_group_builder(rung_env, group_size=2, seed=s, model=TEST_MODEL) for s in range(2)
    ]
    assert [b.env_kwargs["threshold"] for b in state.apply(builders)] == [ALWAYS, ALWAYS]  # type: ignore[attr-defined]
    # Half a window says nothing yet; a full one of successes moves one rung up and starts over.
    row = state.observe(builders, [_group([True, True])], [0])
    assert row[f"curriculum/{rung_env.removesuffix('-v0')}/move"] == 0.0
    label = "test-rungs"
    row = state.observe(builders, [_group([True, True])], [1])
    assert row[f"curriculum/{label}/rung"] == 0.0 and row[f"curriculum/{label}/move"] == 1.0
    assert state.ladders[label].rung == 1 and state.ladders[label].window == []
    state.observe(builders, [_group([True, False]), _group([True, True])], [0, 1])  # 0.75: up again
    assert state.ladders[label].rung == 2
    assert [b.env_kwargs["threshold"] for b in state.apply(builders)] == [NEVER, NEVER]  # type: ignore[attr-defined]
    state.observe(builders, [_group([False, False]), _group([False, True])], [0, 1])  # 0.25: stays
    assert state.ladders[label].rung == 2
    state.observe(builders, [_group([False, False]), _group([False, False])], [0, 1])
    assert state.ladders[label].rung == 1, "and down again"
    capped = CurriculumState(Curriculum(window=1, max_rung=1, start_rung=1), [spec])
    capped.observe(builders, [_group([True, True])], [0])
    assert capped.ladders[label].rung == 1, "max_rung caps the climb"


def test_the_state_is_saved_per_step_and_restored_on_resume(rung_env: str, tmp_path: Path) -> None:
    spec = envsuite.spec(rung_env)
    config = Curriculum(window=1)
    builders = [envsuite.make_group_builder(rung_env, group_size=2, seed=0, model=TEST_MODEL)]
    state = CurriculumState(config, [spec])
    for step in range(3):
        state.observe(builders, [_group([True, True])], [0])
        state.save(tmp_path, step)
    resumed = CurriculumState(config, [spec])
    resumed.restore(tmp_path, 2)  # the checkpoint was after step 1: step 2's line is dropped
    assert resumed.ladders["test-rungs"].rung == 2
    assert [
        json.loads(line)["step"] for line in (tmp_path / "curriculum.jsonl").read_text().splitlines()
    ] == [0, 1]
    with pytest.raises(envsuite.UsageError, match="no curriculum state for step 4"):
        CurriculumState(config, [spec]).restore(tmp_path, 5)
    with pytest.raises(envsuite.UsageError, match="none of the run's envs has difficulty rungs"):
        CurriculumState(config, [envsuite.spec("arithmetic")])


def test_curriculum_settings_are_checked_and_round_trip_through_json() -> None:
    config = TrainConfig(
        env_id="x", log_dir="y", curriculum=Curriculum(promote_at=0.6, window=4), eval_rungs=[0, 2]
    )
    assert TrainConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["curriculum"]["window"] == 4
    for bad in (
        Curriculum(promote_at=0.2, demote_below=0.3),
        Curriculum(window=0),
        Curriculum(start_rung=-1),
    ):
        with pytest.raises(ConfigError):
            TrainConfig(env_id="x", log_dir="y", curriculum=bad).validate()
    with pytest.raises(ConfigError, match="unknown curriculum keys"):
        TrainConfig.from_dict({"env_id": "x", "log_dir": "y", "curriculum": {"promote": 0.5}})
    with pytest.raises(ConfigError, match="eval_rungs"):
        TrainConfig(env_id="x", log_dir="y", eval_rungs=[-1]).validate()


# -- real runs on the tiny model --------------------------------------------------------------


def _run(tmp_path: Path, steps: int, **settings: object) -> list[dict[str, object]]:
    values: dict[str, object] = {
        "log_dir": str(tmp_path),
        "model": TEST_MODEL,
        "n_steps": steps,
        "batch_size": 2,
        "group_size": 2,
        "max_tokens": 2,
        "save_every": 1,
        "eval_every": 0,
        "lora_rank": 4,
    }
    config = TrainConfig.from_dict(values | settings)
    run_training(config, show_progress=False)
    return read_metrics(tmp_path / "metrics.jsonl")


def test_a_curriculum_run_climbs_and_descends_and_resumes_where_it_was(rung_env: str, tmp_path: Path) -> None:
    """Rungs: always, always, never succeed. With a window of one batch the run trains on rungs
    0, 1, 2, 1, 2: up twice on full success, down on none, up again; a resumed run continues the walk."""
    curriculum = Curriculum(promote_at=0.75, demote_below=0.25, window=2)
    rows = _run(tmp_path, 3, env_id=rung_env, curriculum=curriculum)
    rows = _run(tmp_path, 5, env_id=rung_env, curriculum=curriculum)  # resumes at step 3
    key = "curriculum/test-rungs/rung"
    assert [row[key] for row in rows] == [0.0, 1.0, 2.0, 1.0, 2.0]
    assert [row["success"] for row in rows] == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert (tmp_path / "reward_curve.png").stat().st_size > 0


def test_a_multi_env_run_reports_each_env_and_its_held_out_rungs(rung_env: str, tmp_path: Path) -> None:
    rows = _run(
        tmp_path,
        2,
        env_id=f"{rung_env},arithmetic_easy",
        env_weights={rung_env: 1, "arithmetic_easy": 1},
        env_kwargs={rung_env: {"rung": 1}},
        eval_every=1,
        n_test_groups=2,
        eval_rungs=[2],
    )
    last = rows[-1]
    assert last["by_env/test-rungs/success"] == 1.0 and last["by_env/arithmetic_easy/episodes"] == 2
    assert (
        last["test/by_env/test-rungs@rung2/success"] == 0.0 and last["test/by_env/test-rungs/success"] == 1.0
    )
    assert last["test/episodes"] == 4, "the run's own held-out sets make test/, per-rung sets do not"
    episodes = read_eval_rows(tmp_path)
    assert {(r.get("env"), r.get("rung")) for r in episodes} == {
        ("test-rungs", None),
        ("test-rungs", 2),
        ("arithmetic_easy", None),
    }
    assert compare_held_out(tmp_path, "success", env="test-rungs").after.mean == 1.0
    assert compare_held_out(tmp_path, "success", env="test-rungs", rung=2).after.mean == 0.0
    assert compare_held_out(tmp_path, "reward").after.n == 4


def test_the_command_line_names_several_envs_weights_and_the_curriculum(tmp_path: Path) -> None:
    from envsuite.cli._args import Subparsers
    from envsuite.cli._train_cmd import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    sub: Subparsers = parser.add_subparsers(dest="command")
    add_parser(sub)
    argv = [
        "train",
        "arithmetic_easy",
        "reasoning_gym/chain_sum",
        "--env-weight",
        "arithmetic_easy=3",
        "--env-arg",
        "reasoning_gym/chain_sum:rung=2",
        "--curriculum-promote",
        "0.7",
        "--eval-rungs",
        "0",
        "3",
        "--log-dir",
        str(tmp_path),
    ]
    config = config_from_args(parser.parse_args(argv))
    assert config.env_id == "arithmetic_easy,reasoning_gym/chain_sum"
    assert config.env_weights == {"arithmetic_easy": 3.0}
    assert config.env_kwargs == {"reasoning_gym/chain_sum": {"rung": 2}}
    assert config.curriculum == Curriculum(promote_at=0.7) and config.eval_rungs == [0, 3]
    plain = config_from_args(parser.parse_args(["train", "arithmetic", "--curriculum", "--log-dir", "x"]))
    assert plain.curriculum == Curriculum() and plain.env_weights == {}
    assert config_from_args(parser.parse_args(["train", "arithmetic", "--log-dir", "x"])).curriculum is None


def test_results_summarize_each_env_and_rung_of_a_run(tmp_path: Path) -> None:
    from envsuite.cli._results_cmd import run_one, summary_markdown
    from envsuite.trainers import parse_preset

    preset = parse_preset(
        "tiny-mix",
        'env_id = "arithmetic_easy,reasoning_gym/chain_sum"\nmodel = "tiny-random"\nn_steps = 2\n'
        "batch_size = 2\ngroup_size = 2\nmax_tokens = 2\nlora_rank = 4\neval_every = 1\nn_test_groups = 2\n"
        'eval_rungs = [1]\n[preset]\ndescription = "tiny"\nquantity = "reward"\n',
    )
    summary = run_one(preset, tmp_path, {}, show_progress=False)
    by_env = summary["held_out_by_env"]
    assert set(by_env) == {"arithmetic_easy", "reasoning_gym/chain_sum", "reasoning_gym/chain_sum@rung1"}
    assert set(by_env["reasoning_gym/chain_sum@rung1"]) == {"reward", "correct"}
    assert by_env["arithmetic_easy"]["reward"]["before"]["n"] == 2
    assert "  - reasoning_gym/chain_sum@rung1 (n=2): reward" in summary_markdown(summary)
