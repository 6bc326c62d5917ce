"""One step's rollouts: every group of the batch at once, then advantages and datums.

All groups run concurrently (``asyncio.gather``) so a batching sampler sees every request together;
with a remote :class:`~envsuite.executors.WorkerPool` the groups' envs step in its workers and their
sampling calls come back to the driver's policy (``envsuite.executors.rollout_groups``).
A group is *failed* when its builder raised or any of its envs raised (``StopReason.ENV_ERROR``): its
returns are not comparable any more, so it is dropped and counted; the step goes on. A timed-out
episode (``ROLLOUT_TIMEOUT``) is an ordinary outcome and stays in its group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.core import EnvGroupBuilder, StopReason, TokenCompleter, TrajectoryGroup
from envsuite.executors import WorkerPool, rollout_groups
from envsuite.rollouts import GroupRolloutResult, RolloutLimits
from envsuite.trainers._advantages import compute_advantages
from envsuite.trainers._datums import TrainingDatum, trajectory_to_datums


@dataclass(frozen=True)
class BatchRollouts:
    """The finished groups of one step, and the ones that failed."""

    groups_P: list[TrajectoryGroup]
    """Usable groups, in batch order."""
    failed_errors: list[str]
    """One message per failed group (builder error or env error)."""
    seconds: float
    indices_P: list[int] = field(default_factory=list)
    """Each usable group's position in the batch (failed groups leave gaps)."""


async def rollout_batch(
    builders_P: Sequence[EnvGroupBuilder],
    policy: TokenCompleter | Sequence[TokenCompleter],
    limits: RolloutLimits,
    pool: WorkerPool | None = None,
) -> BatchRollouts:
    """Play every group of the batch concurrently (in ``pool``'s workers when it is remote).

    ``policy`` is one completer for every group, or one per group (each seeded for its group, so a
    group samples the same replies whichever sampler plays it and whatever else runs beside it)."""
    started = time.perf_counter()
    if isinstance(policy, TokenCompleter):
        results = await rollout_groups(pool, builders_P, policy, limits)
    else:
        per_group = [rollout_groups(pool, [b], p, limits) for b, p in zip(builders_P, policy, strict=True)]
        results = [r for rs in await asyncio.gather(*per_group) for r in rs]
    return batch_from_results(results, time.perf_counter() - started)


def group_error(result: GroupRolloutResult) -> str | None:
    """Why a finished group cannot be trained on (its builder or an env raised), or None."""
    if result.group is None:
        return result.error
    env_errors = [
        # A game that raised is ended by its coordinator, which says why in the ending log.
        str(t.transitions[-1].logs.get("error") or t.transitions[-1].logs.get("ending") or "env raised")
        for t in result.group.trajectories_G
        if t.stop_reason == StopReason.ENV_ERROR
    ]
    return f"env error: {env_errors[0]}" if env_errors else None


def batch_from_results(results: Sequence[GroupRolloutResult], seconds: float) -> BatchRollouts:
    """The usable groups of a batch in order, and one message per failed group."""
    groups_P: list[TrajectoryGroup] = []
    indices_P: list[int] = []
    errors: list[str] = []
    for index, result in enumerate(results):
        error = group_error(result)
        if error is not None or result.group is None:
            errors.append(f"group {index}: {error}")
            continue
        groups_P.append(result.group)
        indices_P.append(index)
    return BatchRollouts(groups_P, errors, seconds, indices_P)


@dataclass(frozen=True)
class AssembledBatch:
    """Datums of the groups that carry signal, and how many groups carried none."""

    datums_D: list[TrainingDatum]
    n_groups_used: int
    n_groups_constant: int
    """Groups dropped because every member got the same return."""
    advantages: list[float] = field(default_factory=list)


def assemble_batch(
    groups_P: list[TrajectoryGroup], *, scale_by_std: bool, versions_P: Sequence[int] | None = None
) -> AssembledBatch:
    """Advantages per group, then datums per trajectory; constant-reward groups are left out.

    ``versions_P``: the policy version each group was sampled with (carried by its datums; default 0)."""
    datums_D: list[TrainingDatum] = []
    advantages: list[float] = []
    used = constant = 0
    for index, group in enumerate(groups_P):
        result = compute_advantages(group.get_total_rewards(), scale_by_std=scale_by_std)
        if result.constant:
            constant += 1
            continue
        version = versions_P[index] if versions_P is not None else 0
        for trajectory, advantage in zip(group.trajectories_G, result.advantages_G, strict=True):
            datums_D.extend(trajectory_to_datums(trajectory, advantage, used, version))
        advantages.extend(result.advantages_G)
        used += 1
    return AssembledBatch(datums_D, used, constant, advantages)


def split_minibatches(
    datums_D: list[TrainingDatum], n_groups: int, num_substeps: int
) -> list[list[TrainingDatum]]:
    """``num_substeps`` minibatches, each holding whole groups (empty ones are left out)."""
    if n_groups == 0:
        return []
    per = -(-n_groups // num_substeps)
    chunks: list[list[TrainingDatum]] = [[] for _ in range(num_substeps)]
    for datum in datums_D:
        chunks[datum.group_index // per].append(datum)
    return [chunk for chunk in chunks if chunk]
