"""Rollout drivers: run a policy through envs and record trajectories, never letting one env sink a batch.

``do_single_rollout`` plays one episode; ``do_group_rollout`` plays a whole group concurrently (so a
batching sampler sees all requests at once) and applies the builder's group rewards. Failures are data:
an env that raises ends its episode with ``StopReason.ENV_ERROR`` (and the error is kept in the group's
``rollout_errors``), a rollout past its time limit ends with ``StopReason.ROLLOUT_TIMEOUT``, and an
overflow sentinel ends it at once with the sentinel's reward and ``stop/<reason>`` metric.

The drivers take envsuite's envs and tinker-cookbook's alike: both have ``step(action, *, extra=None)``
and the same result fields; a stop reason is read from ``StepResult.stop_reason`` when the result has
one, else from its ``stop/<reason>`` metric (as tinker-cookbook's runner does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envsuite.core import (
    STOP_METRIC_PREFIX,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Metrics,
    RolloutError,
    StopCondition,
    StopReason,
    TokenCompleter,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
    as_overflow,
    stop_reason_from_metrics,
)
from envsuite.errors import UsageError

if TYPE_CHECKING:
    import tinker


@dataclass(frozen=True)
class RolloutLimits:
    """Bounds on one episode."""

    max_turns: int = 64
    """Policy turns before the driver ends the episode with ``MAX_TURNS``."""
    timeout_s: float | None = None
    """Wall-clock bound on the whole episode (policy + env); None: unbounded."""
    constrain_actions: bool = False
    """Sample each action under the env's :meth:`~envsuite.core.Env.action_constraint` (where it
    declares one): the policy must take constraints (``TokenCompleter.takes_constraints``)."""


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


def _overflow_transition(overflow: InitialObservationOverflow) -> Transition:
    """tinker-cookbook's synthetic transition for an oversized first prompt: no tokens, the sentinel's reward."""
    return Transition(
        ob=_empty_observation(),
        ac=TokensWithLogprobs(tokens=[], maybe_logprobs=[]),
        reward=overflow.reward,
        episode_done=True,
        metrics=dict(overflow.metrics),
        logs=dict(overflow.logs),
        stop_reason=stop_reason_from_metrics(overflow.metrics),
    )


def step_stop_reason(result: Any) -> str | None:
    """Why a final step ended: its ``stop_reason`` field when it has one, else its ``stop/`` metric."""
    if not result.episode_done:
        return None
    reason = getattr(result, "stop_reason", None)
    return str(reason) if reason is not None else stop_reason_from_metrics(result.metrics)


@dataclass
class _Episode:
    """What one episode has produced so far (kept when a timeout or an error cuts it short)."""

    transitions: list[Transition]
    final_ob: tinker.ModelInput


async def _run_episode(policy: TokenCompleter, env: Env, limits: RolloutLimits, out: _Episode) -> None:
    """Play the episode, appending transitions to ``out`` as they happen."""
    start = await env.initial_observation()
    overflow = as_overflow(start)
    if overflow is not None:
        out.transitions.append(_overflow_transition(overflow))
        return
    ob, stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
    out.final_ob = ob
    for _ in range(limits.max_turns):
        ac = await next_action(policy, env, ob, stop, constrain_actions=limits.constrain_actions)
        result = await env.step(ac.tokens, extra=ActionExtra(stop_reason=ac.stop_reason))
        out.transitions.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=result.reward,
                episode_done=result.episode_done,
                metrics=result.metrics,
                logs=result.logs,
                stop_reason=step_stop_reason(result),
            )
        )
        ob, stop = result.next_observation, result.next_stop_condition
        out.final_ob = ob
        if result.episode_done:
            return
    out.transitions.append(_terminal(StopReason.MAX_TURNS, ob))


async def next_action(
    policy: TokenCompleter,
    env: Env,
    ob: tinker.ModelInput,
    stop: StopCondition,
    *,
    constrain_actions: bool = False,
) -> TokensWithLogprobs:
    """The policy's next action in ``env``: under the env's action constraint when ``constrain_actions``
    (and the env declares one); a policy that cannot take constraints is then a :class:`UsageError`."""
    action_constraint = getattr(env, "action_constraint", None)  # tinker-cookbook's envs have none
    constraint = action_constraint() if constrain_actions and action_constraint else None
    if constraint is None:
        return await policy(ob, stop)
    if not getattr(policy, "takes_constraints", False):
        raise UsageError(f"{type(policy).__name__} cannot sample under a constraint (constrained actions)")
    return await policy(ob, stop, constraint=constraint)  # type: ignore[call-arg]


@dataclass(frozen=True)
class _Played:
    trajectory: Trajectory
    error: RolloutError | None


async def _play(policy: TokenCompleter, env: Env, limits: RolloutLimits) -> _Played:
    if limits.constrain_actions and not getattr(policy, "takes_constraints", False):
        # A run's setting no episode can honour: the caller's mistake, not one env's failure.
        raise UsageError(f"{type(policy).__name__} cannot sample under a constraint (constrained actions)")
    episode = _Episode([], _empty_observation())
    error = None
    try:
        await asyncio.wait_for(_run_episode(policy, env, limits, episode), limits.timeout_s)
    except TimeoutError:
        episode.transitions.append(_terminal(StopReason.ROLLOUT_TIMEOUT, episode.final_ob))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = RolloutError(type(exc).__name__, str(exc)[:500])
        episode.transitions.append(
            _terminal(StopReason.ENV_ERROR, episode.final_ob, {"error": repr(exc)[:500]})
        )
    reason = episode.transitions[-1].stop_reason if episode.transitions else None
    return _Played(Trajectory(episode.transitions, episode.final_ob, reason), error)


async def do_single_rollout(
    policy: TokenCompleter, env: Env, limits: RolloutLimits | None = None
) -> Trajectory:
    """Play one episode of ``env`` with ``policy``; errors and timeouts end it with a stop reason."""
    return (await _play(policy, env, limits or RolloutLimits())).trajectory


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
    limits = limits or RolloutLimits()
    try:
        envs_G: Sequence[Env] = await builder.make_envs()
    except Exception as exc:
        return GroupRolloutResult(None, f"make_envs failed: {exc!r}", time.perf_counter() - started)
    try:
        played_G = list(await asyncio.gather(*(_play(policy, env, limits) for env in envs_G)))
        trajectories_G = [p.trajectory for p in played_G]
        rewards_and_metrics = await builder.compute_group_rewards(trajectories_G, envs_G)
    except Exception as exc:
        return GroupRolloutResult(None, f"group rewards failed: {exc!r}", time.perf_counter() - started)
    finally:
        await builder.cleanup()
    final_rewards_G = [float(reward) for reward, _ in rewards_and_metrics]
    metrics_G: list[Metrics] = [dict(metrics) for _, metrics in rewards_and_metrics]
    errors = [p.error for p in played_G if p.error is not None]
    group = TrajectoryGroup(trajectories_G, final_rewards_G, metrics_G, rollout_errors=errors)
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
