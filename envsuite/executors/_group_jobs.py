"""Group rollouts through a :class:`WorkerPool`: envs step in the workers, sampling stays in the driver.

In process this is ``asyncio.gather`` over :func:`envsuite.rollouts.do_group_rollout`, exactly as
before. Remote, each group is one job: the builder travels to a worker (builders pickle), the worker
makes the envs and plays them, and every policy call comes back through the channel to the driver's
completer, so one sampler sees every group's requests at once. A job a worker could not finish
becomes a failed group (``GroupRolloutResult.group is None``) with the reason, never a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from envsuite.core import EnvGroupBuilder, Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.executors._pool import JobError, WorkerLostError, WorkerPool
from envsuite.rollouts import GroupRolloutResult, RolloutLimits, do_group_rollout


@dataclass(frozen=True)
class RemoteTokenCompleter(TokenCompleter):
    """A worker's view of the driver's policy: each call goes back through the channel."""

    call: Callable[..., Awaitable[object]]

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        result = await self.call(model_input, stop, max_tokens)
        if not isinstance(result, TokensWithLogprobs):
            raise TypeError(f"the driver's policy returned {type(result).__name__}, not TokensWithLogprobs")
        return result


async def group_rollout_job(
    builder: EnvGroupBuilder, policy: Callable[..., Awaitable[object]], limits: RolloutLimits | None
) -> GroupRolloutResult:
    """One group, run inside a worker (a module-level function, so jobs pickle it by name)."""
    return await do_group_rollout(builder, RemoteTokenCompleter(policy), limits)


async def rollout_groups(
    pool: WorkerPool | None,
    builders_P: Sequence[EnvGroupBuilder],
    policy: TokenCompleter,
    limits: RolloutLimits | None = None,
) -> list[GroupRolloutResult]:
    """Play every group (in process when ``pool`` is None or in process); results in batch order."""
    if pool is None or not pool.remote:
        return list(await asyncio.gather(*(do_group_rollout(b, policy, limits) for b in builders_P)))

    async def policy_call(
        model_input: Observation, stop: StopCondition, max_tokens: int | None
    ) -> TokensWithLogprobs:
        return await policy(model_input, stop, max_tokens=max_tokens)

    handle = pool.expose(policy_call)
    try:
        return list(await asyncio.gather(*(_remote_group(pool, b, handle, limits) for b in builders_P)))
    finally:
        pool.release(handle)


async def _remote_group(
    pool: WorkerPool,
    builder: EnvGroupBuilder,
    handle: Callable[..., Awaitable[object]],
    limits: RolloutLimits | None,
) -> GroupRolloutResult:
    try:
        return await pool.run(group_rollout_job, builder, handle, limits)
    except (JobError, WorkerLostError) as exc:
        return GroupRolloutResult(None, f"worker failed: {exc}")
