"""`envsuite bench --budget small` (issue 51 item 6): multi-turn envs capped in turns, reply tokens and
episode time to what a small model finishes, the limits recorded in each shortened env's result key (a
shortened game never pools with the full one); ``envsuite.make(id)`` and a bench without a budget are as
they were; the progress estimate weighs episodes by their family's cost."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import read_eval_log

import envsuite
from envsuite import register
from envsuite.catalog._make import make_env
from envsuite.catalog.registration import EnvKind
from envsuite.errors import UsageError
from envsuite.evals import BenchConfig, run_bench
from envsuite.evals.bench._budget import EnvLimits, env_limits, episode_cost, profile_budget
from envsuite.evals.bench._progress import BenchSession
from envsuite.evals.bench._rows import sampling_settings
from envsuite.leaderboard import ResultStore
from envsuite.registration import registry
from tests.conftest import TEST_MODEL

GAME = "textarena/TicTacToe-v0"
ENDLESS = "scratch/endless_game-v0"


def _config(tmp_path: Path, *env_ids: str, **settings: Any) -> BenchConfig:
    defaults: dict[str, Any] = {"model": TEST_MODEL, "display": "none", "episodes": 2, "max_tokens": 2}
    return BenchConfig(
        env_ids=env_ids,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        **(defaults | settings),
    )


@pytest.fixture
def endless_game() -> Any:
    """A multi-turn game that never ends by itself (0.2 s and +1 a turn)."""
    register(
        ENDLESS,
        "tests.support.flaky_env:EndlessEnv",
        kind=EnvKind.GAME,
        max_turns=50,
        family="games",
        reward_range=(0.0, 1000.0),
    )
    yield ENDLESS
    registry.unregister(ENDLESS)


def test_make_and_a_bench_without_a_budget_are_as_they_were() -> None:
    assert make_env(GAME, seed=0).max_turns == 100  # type: ignore[attr-defined]
    envsuite.make(GAME).close()  # the gymnasium view builds as before
    plain = BenchConfig(model=TEST_MODEL)
    assert plain.budget == "full" and env_limits(plain, GAME) == EnvLimits(256, 600.0)
    assert sampling_settings(plain, GAME) == {"max_tokens": 256, "temperature": 0.7, "seed": 0}
    with pytest.raises(UsageError, match=r"unknown bench budget 'tiny'.*full, small"):
        BenchConfig(model=TEST_MODEL, budget="tiny")


def test_the_small_budget_shortens_games_and_their_key_says_so() -> None:
    plain, small = BenchConfig(model=TEST_MODEL), BenchConfig(model=TEST_MODEL, budget="small")
    limits = env_limits(small, GAME)
    assert limits.budget == "small" and limits.max_turns == 8 and limits.max_tokens == 96
    assert limits.episode_timeout_s == 600.0  # the bench's own: a budget bounds work, not wall time
    assert sampling_settings(small, GAME) == {
        "max_tokens": 96,
        "temperature": 0.7,
        "seed": 0,
        "budget": "small",
        "max_turns": 8,
        "episode_timeout_s": 600.0,
    }
    assert env_limits(small, "textarena/Poker-v0").max_turns == 4  # never finished in 600 s
    # A single-turn env plays as without a budget: the same limits, the same key (its episodes pool).
    assert profile_budget("small", "arithmetic-v0") is None
    assert sampling_settings(small, "arithmetic-v0") == sampling_settings(plain, "arithmetic-v0")
    # The bench's own settings stay the ceiling: a budget never lengthens anything.
    short = BenchConfig(model=TEST_MODEL, budget="small", max_tokens=32, episode_timeout_s=60)
    assert env_limits(short, GAME) == EnvLimits(32, 60.0, 8, "small")
    assert plain.log_dir() != small.log_dir()


@pytest.mark.parametrize("runner", ["direct", "inspect"])
def test_a_budgeted_game_ends_at_its_turn_cap_and_never_pools_with_the_full_one(
    tmp_path: Path, endless_game: str, runner: str
) -> None:
    small = _config(tmp_path, endless_game, budget="small", runner=runner)
    report = run_bench(small)
    assert report.completed and report.episodes_added == 2
    log = read_eval_log(report.log_paths[0])
    assert (log.eval.task_args or {})["max_turns"] == 8
    for sample in log.samples or []:
        score = (sample.scores or {})["env_reward"]
        assert score.metadata is not None and score.metadata["stop_reason"] == "max_turns"
        assert score.value["reward"] == 8.0  # type: ignore[index]  (one per turn, 8 turns)
    full = _config(tmp_path, endless_game, runner=runner, episode_timeout_s=1)
    assert run_bench(full).completed
    with ResultStore(str(small.db)) as store:
        keys = store.keys([endless_game])
        assert len(keys) == 2  # two runs of the same env and seeds, never pooled
        budgets = sorted(json.loads(k.sampling).get("budget", "full") for k in keys)
        assert budgets == ["full", "small"]
        shortened = next(k for k in keys if "budget" in k.sampling)
        assert json.loads(shortened.sampling)["max_turns"] == 8
        assert {r.config.get("budget") for r in store.runs()} == {"small", None}


def test_the_time_left_weighs_each_episode_by_its_familys_cost() -> None:
    costs = {"game": 10.0, "puzzle": 1.0}
    session = BenchSession(label="m", say=None, cost=costs.__getitem__)
    session.plan(2, 8, to_play=[("game", 4), ("puzzle", 4)])
    assert session.work_total == 44.0
    session.task_started("g", "game", 4)
    session.task_started("p", "puzzle", 4)
    for _ in range(4):
        session.sample_ended("p", 0.0)  # the cheap envs finish first
    session.started = time.monotonic() - 100.0
    eta = session.eta_s()
    # 4 of 44 units took 100 s: 40 units are left (~1000 s), not the 4 episodes' ~100 s.
    assert eta is not None and 990.0 < eta < 1010.0
    session.task_failed("g", "error")  # its episodes are not played in this run
    assert session.work_total == 4.0 and session.eta_s() == 0.0
    assert episode_cost("small", "games") > episode_cost("small", "reasoning")
    assert episode_cost("small", "a family not listed") > 0
