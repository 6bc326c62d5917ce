"""One step's rollouts: every group of the batch at once, then advantages and datums.

All groups run concurrently (``asyncio.gather``) so a batching sampler sees every request together;
with a remote :class:`~envsuite.executors.WorkerPool` the groups' envs step in its workers and their
sampling calls come back to the driver's policy (``envsuite.executors.rollout_groups``).
A group is *failed* when its builder raised or any of its envs raised (``StopReason.ENV_ERROR``): its
returns are not comparable any more, so it is dropped and counted; the step goes on. A timed-out
episode (``ROLLOUT_TIMEOUT``) is an ordinary outcome and stays in its group.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.core import EnvGroupBuilder, StopReason, TokenCompleter, TrajectoryGroup
from envsuite.executors import WorkerPool, rollout_groups
from envsuite.rollouts import RolloutLimits
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
    policy: TokenCompleter,
    limits: RolloutLimits,
    pool: WorkerPool | None = None,
) -> BatchRollouts:
    """Play every group of the batch concurrently (in ``pool``'s workers when it is remote)."""
    started = time.perf_counter()
    results = await rollout_groups(pool, builders_P, policy, limits)
    groups_P: list[TrajectoryGroup] = []
    indices_P: list[int] = []
    errors: list[str] = []
    for index, result in enumerate(results):
        if result.group is None:
            errors.append(f"group {index}: {result.error}")
            continue
        env_errors = [
            # A game that raised is ended by its coordinator, which says why in the ending log.
            str(t.transitions[-1].logs.get("error") or t.transitions[-1].logs.get("ending") or "env raised")
            for t in result.group.trajectories_G
            if t.stop_reason == StopReason.ENV_ERROR
        ]
        if env_errors:
            errors.append(f"group {index}: env error: {env_errors[0]}")
            continue
        groups_P.append(result.group)
        indices_P.append(index)
    return BatchRollouts(groups_P, errors, time.perf_counter() - started, indices_P)


@dataclass(frozen=True)
class AssembledBatch:
    """Datums of the groups that carry signal, and how many groups carried none."""

    datums_D: list[TrainingDatum]
    n_groups_used: int
    n_groups_constant: int
    """Groups dropped because every member got the same return."""
    advantages: list[float] = field(default_factory=list)


def assemble_batch(groups_P: list[TrajectoryGroup], *, scale_by_std: bool) -> AssembledBatch:
    """Advantages per group, then datums per trajectory; constant-reward groups are left out."""
    datums_D: list[TrainingDatum] = []
    advantages: list[float] = []
    used = constant = 0
    for group in groups_P:
        result = compute_advantages(group.get_total_rewards(), scale_by_std=scale_by_std)
        if result.constant:
            constant += 1
            continue
        for trajectory, advantage in zip(group.trajectories_G, result.advantages_G, strict=True):
            datums_D.extend(trajectory_to_datums(trajectory, advantage, used))
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
