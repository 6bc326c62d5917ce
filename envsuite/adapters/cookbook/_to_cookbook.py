"""envsuite envs inside tinker-cookbook: drive them with its rollout code (``do_group_rollout``).

The wrappers produce tinker-cookbook's own ``StepResult``, ``InitialObservationOverflow`` and
``TokensWithLogprobs`` (imported when first used), so its rollout loop treats them as native. Our
stop reasons are already recorded as the ``stop/<reason>`` metric it reads.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from envsuite.core import (
    STOP_METRIC_PREFIX,
    Action,
    Env,
    EnvGroupBuilder,
    Metrics,
    Observation,
    StopCondition,
    StopReason,
    TokenCompleter,
    TokensWithLogprobs,
    Trajectory,
    Transition,
)

COOKBOOK_MISSING = (
    "tinker-cookbook is not installed: every release so far (up to 0.6.1) pins transformers<=5.5.4, "
    "which this project's transformers 5.23 environment cannot take; install it (pip install "
    "tinker-cookbook) in an environment with transformers<=5.5.4 to use the cookbook-side types"
)


def cookbook_module(name: str) -> ModuleType:
    """Import ``tinker_cookbook.<name>``, failing with an explanation when it is not installed."""
    try:
        return importlib.import_module(f"tinker_cookbook.{name}")
    except ImportError as exc:
        raise ImportError(COOKBOOK_MISSING) from exc


class EnvForCookbook:
    """An envsuite env with tinker-cookbook's ``Env`` interface (``step(action, *, extra=None)``)."""

    def __init__(self, env: Env) -> None:
        self.env = env

    async def initial_observation(self) -> Any:
        types = cookbook_module("rl.types")
        start = await self.env.initial_observation()
        if isinstance(start, tuple):
            return start
        reason = StopReason.CONTEXT_OVERFLOW
        logs = {"overflow": f"prompt of {start.prompt_tokens} tokens > budget {start.max_tokens}"}
        return types.InitialObservationOverflow(
            reward=0.0, metrics={STOP_METRIC_PREFIX + reason.value: 1.0}, logs=logs
        )

    async def step(self, action: Action, *, extra: Any = None) -> Any:
        types = cookbook_module("rl.types")
        result = await self.env.step(action)
        return types.StepResult(
            reward=result.reward,
            episode_done=result.episode_done,
            next_observation=result.next_observation,
            next_stop_condition=result.next_stop_condition,
            metrics=dict(result.metrics),
            logs=dict(result.logs),
        )


def _stop_reason_of(metrics: Metrics) -> StopReason | None:
    for key in metrics:
        if key.startswith(STOP_METRIC_PREFIX):
            try:
                return StopReason(key[len(STOP_METRIC_PREFIX) :])
            except ValueError:
                return None
    return None


def _from_cookbook_trajectory(trajectory: Any) -> Trajectory:
    transitions: list[Transition] = []
    for t in trajectory.transitions:
        stop = _stop_reason_of(t.metrics) if t.episode_done else None
        ac = TokensWithLogprobs(list(t.ac.tokens), t.ac.maybe_logprobs)
        transitions.append(
            Transition(t.ob, ac, t.reward, t.episode_done, dict(t.metrics), dict(t.logs), stop)
        )
    return Trajectory(transitions, trajectory.final_ob)


@dataclass(frozen=True)
class GroupBuilderForCookbook:
    """An envsuite group builder with tinker-cookbook's ``EnvGroupBuilder`` interface."""

    builder: EnvGroupBuilder

    async def make_envs(self) -> Sequence[EnvForCookbook]:
        return [EnvForCookbook(env) for env in await self.builder.make_envs()]

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any]
    ) -> list[tuple[float, Metrics]]:
        ours = [_from_cookbook_trajectory(t) for t in trajectory_group]
        envs = [e.env if isinstance(e, EnvForCookbook) else e for e in env_group]
        return await self.builder.compute_group_rewards(ours, envs)

    async def cleanup(self) -> None:
        await self.builder.cleanup()

    def logging_tags(self) -> list[str]:
        return self.builder.logging_tags()


class CompleterForCookbook:
    """An envsuite :class:`TokenCompleter` with tinker-cookbook's ``TokenCompleter`` interface.

    Their rollout loop reads ``stop_reason`` off each sample: ``"stop"`` when the reply ends in a stop
    token, else ``"length"``. ``max_tokens`` per call is left to the wrapped completer's own limit.
    """

    def __init__(self, completer: TokenCompleter) -> None:
        self.completer = completer

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> Any:
        completers = cookbook_module("completers")
        sample = await self.completer(model_input, stop)
        stop_ids = {s for s in stop if isinstance(s, int)}
        clean = bool(sample.tokens) and sample.tokens[-1] in stop_ids
        return completers.TokensWithLogprobs(
            tokens=list(sample.tokens),
            maybe_logprobs=sample.maybe_logprobs,
            stop_reason="stop" if clean else "length",
        )
