"""Training on groups as they arrive: streaming minibatches, and the step both async and streaming share.

A step takes ``batch_size`` groups from a *source* (the step's own rollouts as they finish, or the
async trainer's queue of fresh groups). Without streaming it waits for all of them, then trains as the
synchronous loop does (``num_substeps`` minibatches of whole groups, one optimizer step each). With
``stream_minibatches = M`` (tinker-cookbook's ``StreamMinibatchConfig``) each substep's groups are cut
into M minibatches, and each minibatch's ``forward_backward`` starts as soon as its groups are in,
while the rest are still being sampled; gradients accumulate and one ``optim_step`` ends the substep.
The sampler keeps the step's weights throughout, so on-policy streaming computes the same update as
waiting for the whole batch (up to float summation order), only sooner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from envsuite.core import TrajectoryGroup
from envsuite.trainers._batches import AssembledBatch, assemble_batch, group_error
from envsuite.trainers._clients import TrainOutput
from envsuite.trainers._datums import TrainingDatum
from envsuite.trainers._metrics import kl_metrics
from envsuite.trainers.async_rl._samplers import SampledGroup

Row = dict[str, float | int | str]
GroupSource = Callable[[], Awaitable[SampledGroup]]
"""Gives the next group a step trains on (waiting until one is ready)."""


class Learner(Protocol):
    """What a step needs from the trainer: the loss and optimizer calls, and the KL penalty."""

    async def forward_backward(self, datums: list[TrainingDatum]) -> TrainOutput:
        """One ``forward_backward`` (raises ``NonFiniteLoss`` on a NaN/inf loss)."""
        ...

    async def optim(self, step: int) -> dict[str, float]:
        """One optimizer step at ``step``'s learning rate."""
        ...

    async def kl_penalty(self, datums: list[TrainingDatum]) -> Row:
        """Apply the KL penalty to ``datums`` (no-op without one); its metrics."""
        ...

    async def train(self, step: int, assembled: AssembledBatch) -> Row:
        """Train on a whole batch as the synchronous loop does (``num_substeps`` optimizer steps)."""
        ...


@dataclass
class TrainedStep:
    """The groups one step took, in arrival order, and what training them gave."""

    taken: list[SampledGroup] = field(default_factory=list)
    usable_P: list[TrajectoryGroup] = field(default_factory=list)
    versions_P: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    assembled: AssembledBatch = field(default_factory=lambda: AssembledBatch([], 0, 0))
    row: Row = field(default_factory=dict)

    def add(self, group: SampledGroup) -> SampledGroup | None:
        """Record a taken group; returns it when it can be trained on (not failed)."""
        self.taken.append(group)
        error = group_error(group.result)
        if error is not None or group.result.group is None:
            self.errors.append(f"group {len(self.taken) - 1}: {error}")
            return None
        self.usable_P.append(group.result.group)
        self.versions_P.append(group.version)
        return group


async def collect(source: GroupSource, n_groups: int, into: TrainedStep) -> list[SampledGroup]:
    """The next ``n_groups`` groups from ``source``; the usable ones are returned."""
    usable = []
    for _ in range(n_groups):
        group = into.add(await source())
        if group is not None:
            usable.append(group)
    return usable


def assemble(groups: list[SampledGroup], *, scale_by_std: bool, first_index: int = 0) -> AssembledBatch:
    """Datums of ``groups`` (versions carried), group indices starting at ``first_index``."""
    assembled = assemble_batch(
        [g.result.group for g in groups if g.result.group is not None],
        scale_by_std=scale_by_std,
        versions_P=[g.version for g in groups],
    )
    if first_index:
        datums = [replace(d, group_index=d.group_index + first_index) for d in assembled.datums_D]
        assembled = AssembledBatch(
            datums, assembled.n_groups_used, assembled.n_groups_constant, assembled.advantages
        )
    return assembled


def merge(total: AssembledBatch, part: AssembledBatch) -> AssembledBatch:
    return AssembledBatch(
        total.datums_D + part.datums_D,
        total.n_groups_used + part.n_groups_used,
        total.n_groups_constant + part.n_groups_constant,
        total.advantages + part.advantages,
    )


async def train_streaming(
    source: GroupSource,
    learner: Learner,
    step: int,
    *,
    batch_size: int,
    num_substeps: int,
    minibatches: int,
    scale_by_std: bool,
) -> TrainedStep:
    """One step of streaming minibatches over ``batch_size`` groups from ``source``."""
    out = TrainedStep()
    per_minibatch = batch_size // num_substeps // minibatches
    kl_rows: list[Row] = []
    penalty_rows: list[Row] = []
    losses: list[float] = []
    optim_steps = trained_tokens = 0
    for _ in range(num_substeps):
        launched: list[tuple[list[TrainingDatum], asyncio.Task[TrainOutput]]] = []
        try:
            for _ in range(minibatches):
                groups = await collect(source, per_minibatch, out)
                part = assemble(groups, scale_by_std=scale_by_std, first_index=out.assembled.n_groups_used)
                out.assembled = merge(out.assembled, part)
                if not part.datums_D:
                    continue
                penalty_rows.append(await learner.kl_penalty(part.datums_D))
                task = asyncio.create_task(learner.forward_backward(part.datums_D))
                launched.append((part.datums_D, task))
            outputs = [await task for _, task in launched]
        finally:
            for _, task in launched:
                task.cancel()
        if not launched:
            continue
        optim = await learner.optim(step)
        optim_steps += 1
        out.row.update({f"optim/{k}": v for k, v in optim.items()})
        for (datums, _), output in zip(launched, outputs, strict=True):
            kl_rows.append(kl_metrics(datums, output.logprobs_D))
            losses.append(output.loss_sum)
            trained_tokens += sum(d.n_action_tokens for d in datums)
    out.row.update(mean_rows(kl_rows + penalty_rows))
    out.row["loss/sum"] = float(np.sum(losses)) if losses else 0.0
    out.row["tokens/trained"] = trained_tokens
    out.row["optim_steps"] = optim_steps
    out.row["stream/minibatches"] = len(kl_rows)  # the ones that had datums to train on
    return out


def mean_rows(rows: list[Row]) -> Row:
    """Each numeric key's mean over the rows that have it."""
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, int | float)})
    return {k: float(np.mean([float(r[k]) for r in rows if k in r])) for k in keys}
