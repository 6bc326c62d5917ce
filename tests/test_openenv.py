"""OpenEnv both ways, on real servers on 127.0.0.1: OpenEnv's own client drives `envsuite serve-env`,
an envsuite env served that way passes `envsuite check` and trains through the `openenv:` entry, seeds
survive the wire, 64 concurrent sessions run without an error, and a server killed mid-episode gives
a defined stop reason.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from openenv.core import GenericEnvClient  # at import, not in a coroutine (see the adapter's _client)

from envsuite import StopReason, make_env, make_group_builder, spec
from envsuite.testing import check_env
from envsuite.trainers import TrainConfig, read_metrics, run_training
from tests.conftest import TEST_MODEL

ROOT = Path(__file__).parents[1]


def _bench_module() -> ModuleType:
    loaded = importlib.util.spec_from_file_location("openenv_load", ROOT / "bench" / "openenv_load.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules["openenv_load"] = module
    loaded.loader.exec_module(module)
    return module


LOAD = _bench_module()


@pytest.fixture(scope="module")
def twenty_questions_url() -> Iterator[str]:
    with LOAD.served("twenty_questions", TEST_MODEL) as (url, _):
        yield url


@pytest.fixture(scope="module")
def tictactoe_url() -> Iterator[str]:
    with LOAD.served("tictactoe", TEST_MODEL) as (url, _):
        yield url


async def _play(url: str, seed: int, replies: list[str]) -> list[Any]:
    async with GenericEnvClient(base_url=url) as client:
        result = await client.reset(seed=seed)
        trace: list[Any] = [result.observation["messages"]]
        turns = 0
        while not result.done:
            result = await client.step({"text": replies[turns % len(replies)]})
            trace.append((result.observation["messages"][-1], result.reward, result.done))
            turns += 1
            assert turns <= 30, "the episode never ended"
        trace.append(result.observation["stop_reason"])
        state = await client.state()
        assert state["seed"] == seed and state["done"] and state["step_count"] == turns
    return trace


def test_openenv_client_plays_twenty_questions_to_the_end(twenty_questions_url: str) -> None:
    replies = ["Is it an animal?", "Is it bigger than a cat?", "Guess: dog"]
    first = asyncio.run(_play(twenty_questions_url, 7, replies))
    assert first[-1] in {StopReason.COMPLETED.value, StopReason.MAX_TURNS.value}
    assert asyncio.run(_play(twenty_questions_url, 7, replies)) == first  # reset(seed) replays
    others = [asyncio.run(_play(twenty_questions_url, seed, replies)) for seed in (8, 9, 10)]
    assert any(trace != first for trace in others)  # other seeds, other secret words


def test_openenv_client_plays_tictactoe_to_the_end(tictactoe_url: str) -> None:
    replies = ["[4]", "[0]", "[8]", "[2]", "[6]", "[1]", "[3]", "[5]", "[7]"]
    trace = asyncio.run(_play(tictactoe_url, 3, replies))
    assert trace[-1] in {StopReason.COMPLETED.value, StopReason.INVALID_MOVE.value}
    assert trace[-2][2] is True
    assert asyncio.run(_play(tictactoe_url, 3, replies)) == trace


def test_served_env_passes_the_checker_through_the_openenv_entry(twenty_questions_url: str) -> None:
    env_id = f"openenv:{twenty_questions_url}"
    env_spec = spec(env_id)
    assert (env_spec.kind.value, env_spec.reward_range, env_spec.max_turns) == ("multi-turn", (0.0, 1.0), 20)
    report = check_env(env_id, model=TEST_MODEL)
    assert report.passed, report.render()


def test_a_group_on_the_openenv_entry_shares_one_episode(tictactoe_url: str) -> None:
    async def firsts() -> list[list[int]]:
        envs = await make_group_builder(
            f"openenv:{tictactoe_url}", group_size=3, seed=5, model=TEST_MODEL
        ).make_envs()
        prompts = []
        for env in envs:
            start = await env.initial_observation()
            prompts.append(start[0].to_ints())  # type: ignore[index]
            await env._close()  # type: ignore[attr-defined]
        return prompts

    prompts = asyncio.run(firsts())
    assert prompts[0] == prompts[1] == prompts[2]


def test_trainer_runs_on_the_openenv_entry(tictactoe_url: str, tmp_path: Path) -> None:
    config = TrainConfig(
        env_id=f"openenv:{tictactoe_url}",
        log_dir=str(tmp_path / "run"),
        model=TEST_MODEL,
        n_steps=2,
        batch_size=2,
        group_size=2,
        max_tokens=8,
        eval_every=0,
        max_turns=12,
    )
    result = run_training(config, show_progress=False)
    assert result.steps_completed == 2, result.message
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(r["groups/failed"] == 0 and r["groups/finished"] == 2 for r in rows)


def test_a_server_killed_mid_episode_ends_the_episode_with_env_error() -> None:
    async def episode(url: str, kill: Any) -> Any:
        env = make_env(f"openenv:{url}", seed=1, model=TEST_MODEL)
        start = await env.initial_observation()
        assert not isinstance(start, type(None))
        kill()
        return await asyncio.wait_for(env.step([1, 2, 3]), timeout=120)

    with LOAD.served("twenty_questions", TEST_MODEL) as (url, proc):
        spec(f"openenv:{url}")  # resolve while the server is up
        result = asyncio.run(episode(url, proc.kill))
    assert result.episode_done and result.stop_reason is StopReason.ENV_ERROR
    assert "OpenEnv server" in str(result.logs["error"])


def test_sixty_four_concurrent_sessions_on_one_server(tictactoe_url: str) -> None:
    result = asyncio.run(LOAD.run_load(tictactoe_url, "tictactoe", sessions=64, episodes=1, deadline_s=600))
    assert result.errors == 0, result.first_error
    assert result.episodes == 64 and result.steps >= 64 * 3


def test_bench_runs_on_the_openenv_entry(tictactoe_url: str, tmp_path: Path) -> None:
    from envsuite.cli import main
    from envsuite.leaderboard import ResultStore

    db = tmp_path / "board.sqlite"
    args = ["bench", "--model", TEST_MODEL, "--envs", f"openenv:{tictactoe_url}", "--episodes", "2"]
    assert main([*args, "--max-tokens", "8", "--log-dir", str(tmp_path / "logs"), "--db", str(db)]) == 0
    with ResultStore(db) as store:
        (key,) = store.keys()
        assert key.env_id == f"openenv:{tictactoe_url}"
        assert spec(key.versioned_env_id).id == f"openenv:{tictactoe_url}"  # the stored id resolves back
        assert len(store.episodes()) == 2
