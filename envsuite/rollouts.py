"""Rollout drivers: run a policy through envs and record trajectories, never letting one env sink a batch.

``do_single_rollout`` plays one episode; ``do_group_rollout`` plays a whole group concurrently (so a
batching sampler sees all requests at once) and applies the builder's group rewards. Failures are data:
an env that raises ends its episode with ``StopReason.ENV_ERROR``, a rollout past its time limit ends
with ``StopReason.ROLLOUT_TIMEOUT``, and a prompt that does not fit ends with ``CONTEXT_OVERFLOW``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envsuite.core import (
    STOP_METRIC_PREFIX,
    Env,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Metrics,
    StopReason,
    TokenCompleter,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

if TYPE_CHECKING:
    import tinker


@dataclass(frozen=True)
class RolloutLimits:
    """Bounds on one episode."""

    max_turns: int = 64
    """Policy turns before the driver ends the episode with ``MAX_TURNS``."""
    timeout_s: float | None = None
    """Wall-clock bound on the whole episode (policy + env); None: unbounded."""


def _empty_observation() -> tinker.ModelInput:
    import tinker

    return tinker.ModelInput.empty()


def _terminal(
    reason: StopReason, ob: tinker.ModelInput, logs: dict[str, str | int | float] | None = None
) -> Transition:
    return Transition(
        ob=ob,
        ac=TokensWithLogprobs(tokens=[], maybe_logprobs=[]),
        reward=0.0,
        episode_done=True,
        metrics={STOP_METRIC_PREFIX + reason.value: 1.0},
        logs=dict(logs or {}),
        stop_reason=reason,
    )


async def _run_episode(
    policy: TokenCompleter, env: Env, limits: RolloutLimits, out: list[Transition]
) -> tinker.ModelInput:
    """Play the episode, appending transitions to ``out`` as they happen; return the final observation."""
    start = await env.initial_observation()
    if isinstance(start, InitialObservationOverflow):
        out.append(
            _terminal(
                StopReason.CONTEXT_OVERFLOW,
                _empty_observation(),
                {"prompt_tokens": start.prompt_tokens, "max_tokens": start.max_tokens},
            )
        )
        return _empty_observation()
    ob, stop = start
    for _ in range(limits.max_turns):
        ac = await policy(ob, stop)
        result = await env.step(ac.tokens)
        out.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=result.reward,
                episode_done=result.episode_done,
                metrics=result.metrics,
                logs=result.logs,
                stop_reason=result.stop_reason,
            )
        )
        ob, stop = result.next_observation, result.next_stop_condition
        if result.episode_done:
            return ob
    out.append(_terminal(StopReason.MAX_TURNS, ob))
    return ob


async def do_single_rollout(
    policy: TokenCompleter, env: Env, limits: RolloutLimits | None = None
) -> Trajectory:
    """Play one episode of ``env`` with ``policy``; errors and timeouts end it with a stop reason."""
    limits = limits or RolloutLimits()
    transitions: list[Transition] = []
    final_ob = _empty_observation()
    try:
        final_ob = await asyncio.wait_for(_run_episode(policy, env, limits, transitions), limits.timeout_s)
    except TimeoutError:
        transitions.append(_terminal(StopReason.ROLLOUT_TIMEOUT, final_ob))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        transitions.append(_terminal(StopReason.ENV_ERROR, final_ob, {"error": repr(exc)[:500]}))
    return Trajectory(transitions=transitions, final_ob=final_ob)


@dataclass(frozen=True)
class GroupRolloutResult:
    """A finished group, or why it could not be used."""

    group: TrajectoryGroup | None
    """None when the builder itself failed (no envs were made)."""
    error: str | None = None
    seconds: float = 0.0


async def do_group_rollout(
    builder: EnvGroupBuilder, policy: TokenCompleter, limits: RolloutLimits | None = None
) -> GroupRolloutResult:
    """Play every env of a group concurrently and compute the group rewards."""
    started = time.perf_counter()
    try:
        envs_G: Sequence[Env] = await builder.make_envs()
    except Exception as exc:
        return GroupRolloutResult(None, f"make_envs failed: {exc!r}", time.perf_counter() - started)
    try:
        trajectories_G = list(
            await asyncio.gather(*(do_single_rollout(policy, env, limits) for env in envs_G))
        )
        rewards_and_metrics = await builder.compute_group_rewards(trajectories_G, envs_G)
    except Exception as exc:
        return GroupRolloutResult(None, f"group rewards failed: {exc!r}", time.perf_counter() - started)
    finally:
        await builder.cleanup()
    final_rewards_G = [reward for reward, _ in rewards_and_metrics]
    metrics_G: list[Metrics] = [metrics for _, metrics in rewards_and_metrics]
    group = TrajectoryGroup(trajectories_G, final_rewards_G, metrics_G)
    return GroupRolloutResult(group, None, time.perf_counter() - started)


def episode_metrics(trajectory: Trajectory) -> Metrics:
    """Per-episode numbers: return, turns, policy tokens, and the env's metrics summed over steps."""
    metrics: Metrics = {
        "reward": trajectory.total_reward,
        "turns": sum(1 for t in trajectory.transitions if t.ac.tokens or not t.episode_done),
        "ac_tokens": sum(len(t.ac.tokens) for t in trajectory.transitions),
    }
    for transition in trajectory.transitions:
        for key, value in transition.metrics.items():
            metrics[key] = metrics.get(key, 0) + value
    return metrics
