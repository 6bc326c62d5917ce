"""envsuite envs in tinker-cookbook's rollouts: the one thing that differs is the overflow sentinel's class.

envsuite's group builders, envs and completers run under tinker-cookbook's ``do_group_rollout`` as
they are (same ``step(action, *, extra=None)``, same result fields, ``stop/<reason>`` metrics, group
rewards over fields both ``Trajectory`` types have, completers that take ``max_tokens=`` and report
``stop_reason``). Only an oversized first prompt needs help: tinker-cookbook's runner recognises the
overflow sentinel by ``isinstance`` on its own class, so :class:`GroupBuilderForCookbook` (and
:class:`EnvForCookbook`) hand it theirs, built from ours field for field. Everything else passes
through untouched.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from envsuite.core import Action, ActionExtra, Env, EnvGroupBuilder, Metrics, as_overflow

COOKBOOK_MISSING = (
    "tinker-cookbook is not installed: every release so far pins transformers<=5.5.4, which this "
    "project's environment cannot take; install it without its dependencies (pip install --no-deps "
    "tinker-cookbook==0.5.8, then the test extras, as the Makefile does)"
)


def cookbook_module(name: str) -> ModuleType:
    """Import ``tinker_cookbook.<name>``, failing with an explanation when it is not installed."""
    try:
        return importlib.import_module(f"tinker_cookbook.{name}")
    except ImportError as exc:
        raise ImportError(COOKBOOK_MISSING) from exc


class EnvForCookbook:
    """An envsuite env whose overflow sentinel is tinker-cookbook's class; everything else is the env's own."""

    def __init__(self, env: Env) -> None:
        self.env = env

    async def initial_observation(self) -> Any:
        start = await self.env.initial_observation()
        overflow = as_overflow(start)
        if overflow is None:
            return start
        types = cookbook_module("rl.types")
        return types.InitialObservationOverflow(
            reward=overflow.reward, metrics=dict(overflow.metrics), logs=dict(overflow.logs)
        )

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> Any:
        return await self.env.step(action, extra=extra)


@dataclass(frozen=True)
class GroupBuilderForCookbook:
    """An envsuite group builder whose envs hand tinker-cookbook its own overflow sentinel."""

    builder: EnvGroupBuilder

    async def make_envs(self) -> Sequence[EnvForCookbook]:
        return [EnvForCookbook(env) for env in await self.builder.make_envs()]

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any]
    ) -> list[tuple[float, Metrics]]:
        envs = [e.env if isinstance(e, EnvForCookbook) else e for e in env_group]
        return await self.builder.compute_group_rewards(trajectory_group, envs)

    async def cleanup(self) -> None:
        await self.builder.cleanup()

    def logging_tags(self) -> list[str]:
        return self.builder.logging_tags()
