"""Rollouts and benchmarks through the executor seam: in process, a spawn process pool, and a real Ray.

The same seeds through every executor give identical trajectories with a scripted policy (envs step in
the workers, the policy answers from the driver through the callback channel); `envsuite train` and
`envsuite bench` run with `--executor ray`; a worker that dies fails its job instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from envsuite import RendererConfig, make_group_builder
from envsuite.cli import main
from envsuite.core import EnvGroupBuilder
from envsuite.executors import (
    ExecutorConfig,
    ExecutorConfigError,
    ExecutorKind,
    WorkerLostError,
    open_pool,
    rollout_groups,
)
from envsuite.leaderboard import ResultStore
from envsuite.rollouts import GroupRolloutResult, RolloutLimits
from tests.conftest import TEST_MODEL
from tests.support.policies import PromptKeyedCompleter

RENDERER = RendererConfig(model_name=TEST_MODEL)


def _builders() -> list[EnvGroupBuilder]:
    return [
        make_group_builder("arithmetic", group_size=2, seed=11, renderer=RENDERER),
        make_group_builder("math", group_size=2, seed=12, renderer=RENDERER),
        make_group_builder("twenty_questions", group_size=2, seed=13, renderer=RENDERER),
        make_group_builder("tictactoe", group_size=2, seed=14, renderer=RENDERER),
    ]


def _signature(results: list[GroupRolloutResult]) -> list[Any]:
    """Everything a trajectory holds, as plain values (observations as token ids)."""
    out: list[Any] = []
    for result in results:
        assert result.group is not None, result.error
        for trajectory, final in zip(result.group.trajectories_G, result.group.final_rewards_G, strict=True):
            out.append(
                (
                    [
                        (
                            t.ob.to_ints(),
                            t.ac.tokens,
                            t.reward,
                            t.episode_done,
                            dict(t.metrics),
                            t.stop_reason,
                        )
                        for t in trajectory.transitions
                    ],
                    trajectory.final_ob.to_ints(),
                    final,
                )
            )
    return out


async def _rollouts(config: ExecutorConfig) -> tuple[list[Any], int]:
    policy = PromptKeyedCompleter(RENDERER)
    async with open_pool(config) as pool:
        assert pool.remote == (config.kind is not ExecutorKind.INPROCESS)
        results = await rollout_groups(pool, _builders(), policy, RolloutLimits(max_turns=30))
    return _signature(results), policy.calls


def test_same_seeds_give_identical_trajectories_in_process_in_a_process_pool_and_on_ray(
    ray_session: None,
) -> None:
    for builder in _builders():
        pickle.loads(pickle.dumps(builder))  # builders travel to the workers
    expected, calls = asyncio.run(_rollouts(ExecutorConfig()))
    assert calls > 8 and len(expected) == 8
    assert any(len(steps) > 1 for steps, _, _ in expected)  # multi-turn envs took several turns
    for kind in (ExecutorKind.PROCESS, ExecutorKind.RAY):
        got, remote_calls = asyncio.run(_rollouts(ExecutorConfig(kind, workers=2)))
        assert remote_calls == calls, kind  # every policy call came back to the driver's completer
        assert got == expected, kind


async def _die() -> None:
    os._exit(3)


async def _echo(value: int) -> int:
    return value


async def _worker_death(config: ExecutorConfig) -> tuple[int, type[BaseException]]:
    async with open_pool(config) as pool:
        with pytest.raises(WorkerLostError) as info:
            await asyncio.wait_for(pool.run(_die), timeout=300)
        survivor = await asyncio.wait_for(pool.run(_echo, 7), timeout=300)
    return survivor, info.type


def test_a_worker_that_dies_fails_its_job_and_is_replaced(ray_session: None) -> None:
    survivor, _ = asyncio.run(_worker_death(ExecutorConfig(ExecutorKind.RAY, workers=2)))
    assert survivor == 7


def test_executor_config_is_small_data_and_checks_its_settings() -> None:
    config = ExecutorConfig.create("ray", workers=4, ray_address="127.0.0.1:6379")
    assert pickle.loads(pickle.dumps(config)) == config
    assert ExecutorConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ExecutorConfigError, match="inprocess, process, ray"):
        ExecutorConfig.create("threads")
    with pytest.raises(ExecutorConfigError, match="workers"):
        ExecutorConfig(ExecutorKind.PROCESS, workers=0)
    with pytest.raises(ExecutorConfigError, match="only used with the ray executor"):
        ExecutorConfig(ExecutorKind.PROCESS, ray_address="h:1")


def test_envsuite_train_with_the_ray_executor(ray_session: None, tmp_path: Path) -> None:
    log_dir = tmp_path / "run"
    args = ["train", "arithmetic_easy", "--model", TEST_MODEL, "--log-dir", str(log_dir), "--steps", "2"]
    args += [
        "--batch-size",
        "2",
        "--group-size",
        "2",
        "--max-tokens",
        "8",
        "--eval-every",
        "0",
        "--no-progress",
    ]
    assert main([*args, "--executor", "ray", "--workers", "2"]) == 0
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["groups/finished"] == 2 and r["groups/failed"] == 0 for r in rows)
    assert json.loads((log_dir / "config.json").read_text())["executor"] == "ray"


def test_envsuite_bench_with_the_ray_executor(ray_session: None, tmp_path: Path) -> None:
    db = tmp_path / "board.sqlite"
    args = ["bench", "--model", TEST_MODEL, "--envs", "arithmetic_easy", "tictactoe", "--episodes", "2"]
    args += ["--max-tokens", "8", "--log-dir", str(tmp_path / "logs"), "--db", str(db)]
    assert main([*args, "--executor", "ray", "--workers", "2"]) == 0
    with ResultStore(db) as store:
        episodes = store.episodes()
        assert len(episodes) == 4
        assert all("stop/env_error" not in e.episode.metrics for e in episodes)
