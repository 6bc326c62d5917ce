"""The tool-use envs on every executor: the same seeds give identical trajectories in process, in a
spawn process pool and on a real Ray (the envs and their tools run in the workers; a scripted policy
that calls tools answers from the driver)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

from envsuite import RendererConfig, make_group_builder
from envsuite.core import EnvGroupBuilder
from envsuite.executors import ExecutorConfig, ExecutorKind, open_pool, rollout_groups
from envsuite.rollouts import GroupRolloutResult, RolloutLimits
from tests.conftest import TEST_MODEL
from tests.support.policies import ToolCallingKeyedCompleter

RENDERER = RendererConfig(model_name=TEST_MODEL)
IDS = ("tools/calculator", "tools/search", "tools/search_multihop", "tools/kv_store")


def _builders() -> list[EnvGroupBuilder]:
    return [
        make_group_builder(env_id, group_size=2, seed=30 + i, renderer=RENDERER)
        for i, env_id in enumerate(IDS)
    ]


def _signature(results: list[GroupRolloutResult]) -> list[Any]:
    out: list[Any] = []
    for result in results:
        assert result.group is not None, result.error
        for trajectory in result.group.trajectories_G:
            steps = [
                (t.ob.to_ints(), t.ac.tokens, t.reward, dict(t.metrics), t.stop_reason)
                for t in trajectory.transitions
            ]
            out.append((steps, trajectory.final_ob.to_ints()))
    return out


async def _rollouts(config: ExecutorConfig) -> tuple[list[Any], int]:
    policy = ToolCallingKeyedCompleter(RENDERER)
    async with open_pool(config) as pool:
        results = await rollout_groups(pool, _builders(), policy, RolloutLimits(max_turns=8))
    return _signature(results), policy.calls


def test_tool_envs_give_identical_trajectories_on_every_executor(ray_session: None) -> None:
    for builder in _builders():
        pickle.loads(pickle.dumps(builder))
    expected, calls = asyncio.run(_rollouts(ExecutorConfig()))
    assert len(expected) == 8 and any(len(steps) > 1 for steps, _ in expected)  # tools were called
    for kind in (ExecutorKind.PROCESS, ExecutorKind.RAY):
        got, remote_calls = asyncio.run(_rollouts(ExecutorConfig(kind, workers=2)))
        assert remote_calls == calls, kind
        assert got == expected, kind
