"""Async off-policy training with a staleness bound (tinker-cookbook's ``AsyncConfig``), resumable exactly.

Sampling and training run at the same time. ``batch_size`` sampler loops take the dataset's groups
in order (group ``j`` of batch ``b`` is *slot* ``(b, j)``), play each with the newest weights the
sampling service has, and queue the result with the policy version that sampled it. Step ``i`` takes
the next ``batch_size`` queued groups whose staleness ``i - version`` is at most
``async_max_steps_off_policy`` (K); an older group is dropped, counted (``async/dropped_groups``), and
its slot goes back in the queue to be sampled again with newer weights, as cookbook requeues it. A
failed group (an env raised) is taken and counted as in the synchronous loop. The importance-sampling
losses correct for the lag: each datum carries its sampler's logprobs (and its version), and the loss
weighs each token by the learner-to-sampler probability ratio.

A loop starts a group only when it can still be fresh when a step takes it: groups are taken in the
order they finish, so a group started while ``n`` others are outstanding lands about ``n //
batch_size`` steps after the one being collected. So K bounds how far sampling runs ahead: with K = 0
the loops start exactly one batch and then wait for the new weights (no group is sampled only to be
dropped), with K = 1 they sample the next batch with the old weights while a step trains, and so on.
Groups still go stale when that guess fails (a slow group overtaken by fast ones).

Resume is exact about which groups were trained: ``groups.jsonl`` gets one row per group a step took
or dropped (``slot``, ``version``, ``staleness``, ``outcome``), written as the step ends. A resumed run
keeps the rows before its checkpoint's step, skips every slot they took, and samples the rest again
(groups in flight or queued at the kill were never trained, so nothing is lost and nothing is trained
twice); a slot dropped ``n`` times is sampled with its ``n``-th retry seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.core import EnvGroupBuilder, RLDataset
from envsuite.trainers._advantages import compute_advantages
from envsuite.trainers.async_rl._samplers import SampledGroup, SamplingService, group_seed
from envsuite.trainers.async_rl._stream import Learner, TrainedStep, assemble, collect, train_streaming

if TYPE_CHECKING:
    from envsuite.trainers._config import TrainConfig

Row = dict[str, float | int | str]
LEDGER_FILE = "groups.jsonl"


class GroupOutcome(enum.StrEnum):
    """What a step did with a group."""

    TRAINED = "trained"
    """Taken, and its members' returns differed: its datums were trained on."""
    CONSTANT = "constant"
    """Taken, but every member got the same return: no signal, no datums."""
    FAILED = "failed"
    """Taken, but its builder or an env raised: counted in ``groups/failed``."""
    STALE = "stale"
    """Dropped: sampled more than ``async_max_steps_off_policy`` steps ago; its slot is sampled again."""


@dataclass(frozen=True, order=True)
class Slot:
    """Group ``index`` of the dataset's batch ``batch``."""

    batch: int
    index: int


@dataclass(frozen=True)
class LedgerRow:
    step: int
    slot: Slot
    version: int
    outcome: GroupOutcome

    def to_json(self) -> str:
        return json.dumps(
            {
                "step": self.step,
                "slot": [self.slot.batch, self.slot.index],
                "version": self.version,
                "staleness": self.step - self.version,
                "outcome": self.outcome.value,
            },
            sort_keys=True,
        )


class GroupLedger:
    """``groups.jsonl``: which slot each step took or dropped (appended and fsynced per step)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[LedgerRow]:
        """Every complete row (a torn last line from a kill mid-write is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
                slot = Slot(int(data["slot"][0]), int(data["slot"][1]))
                out.append(
                    LedgerRow(int(data["step"]), slot, int(data["version"]), GroupOutcome(data["outcome"]))
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
                continue
        return out

    def truncate(self, next_step: int) -> list[LedgerRow]:
        """Keep the rows of steps before ``next_step`` (atomically); returns them."""
        kept = [row for row in self.rows() if row.step < next_step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(row.to_json() + "\n" for row in kept), encoding="utf-8")
        os.replace(tmp, self.path)
        return kept

    def append(self, rows: list[LedgerRow]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(row.to_json() + "\n" for row in rows))
            f.flush()
            os.fsync(f.fileno())


class AsyncSteps:
    """The sampler loops and the steps that take their groups; use :func:`async_steps`."""

    def __init__(
        self,
        config: TrainConfig,
        service: SamplingService,
        train_data: RLDataset,
        learner: Learner,
        ledger: GroupLedger,
        start: int,
    ) -> None:
        assert config.steps.async_max_steps_off_policy is not None
        self.config = config
        self.max_staleness = config.steps.async_max_steps_off_policy
        self.service = service
        self.train_data = train_data
        self.learner = learner
        self.ledger = ledger
        kept = ledger.truncate(start)
        taken = {row.slot for row in kept if row.outcome is not GroupOutcome.STALE}
        self._attempts: Counter[Slot] = Counter(row.slot for row in kept if row.outcome is GroupOutcome.STALE)
        self._pending: asyncio.Queue[Slot] = asyncio.Queue()
        for batch in range(config.steps.n_steps):
            for index in range(config.steps.batch_size):
                if Slot(batch, index) not in taken:
                    self._pending.put_nowait(Slot(batch, index))
        self._finished: asyncio.Queue[tuple[Slot, SampledGroup] | BaseException] = asyncio.Queue()
        self._builders: dict[int, list[EnvGroupBuilder]] = {}
        self._collecting = start
        self._taken_now = 0
        """Groups the step being collected has taken so far."""
        self._outstanding = 0
        """Groups started and not yet taken or dropped by a step (in flight or queued)."""
        self._changed = asyncio.Condition()
        self._loops: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ sampler loops

    def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._sampler_loop(), name=f"envsuite-async-sampler-{i}")
            for i in range(self.config.steps.batch_size)
        ]

    async def stop(self) -> None:
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _sampler_loop(self) -> None:
        try:
            await self._sample_forever()
        except Exception as exc:  # no sampler left, or a bug: the step waiting for groups must hear of it
            self._finished.put_nowait(exc)

    async def _sample_forever(self) -> None:
        while True:
            slot = await self._pending.get()
            async with self._changed:
                # Start a group only if it can still be fresh when its turn comes (module docstring).
                await self._changed.wait_for(self._fresh_when_taken)
                self._outstanding += 1
            attempt = self._attempts[slot]
            stream = "sampling" if attempt == 0 else f"sampling/retry{attempt}"
            seed = group_seed(self.config.steps.seed, stream, slot.batch, slot.index)
            sampled = await self.service.rollout(self._builder(slot), seed)
            self._finished.put_nowait((slot, sampled))

    def _fresh_when_taken(self) -> bool:
        """Would a group started now be within the staleness bound at the step that takes it?

        Groups are taken in the order they finish, so one started now comes after every group already
        taken by the current step or outstanding: it lands ``(taken + outstanding) // batch_size``
        steps after the one being collected (earlier if some of those are dropped)."""
        lands = self._collecting + (self._taken_now + self._outstanding) // self.config.steps.batch_size
        return lands - self.service.version <= self.max_staleness

    def _builder(self, slot: Slot) -> EnvGroupBuilder:
        if slot.batch not in self._builders:
            self._builders[slot.batch] = list(self.train_data.get_batch(slot.batch))
        return self._builders[slot.batch][slot.index]

    async def _set_collecting(self, step: int) -> None:
        async with self._changed:
            self._collecting, self._taken_now = step, 0
            self._changed.notify_all()

    async def _consumed(self, taken: bool) -> None:
        """A finished group was taken by the step being collected (or dropped)."""
        async with self._changed:
            self._outstanding -= 1
            self._taken_now += taken
            self._changed.notify_all()

    async def notify_version(self) -> None:
        """Wake the loops waiting for new weights (after :meth:`SamplingService.publish`)."""
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ one step

    async def step(self, step: int, waited: dict[str, float]) -> TrainedStep:
        """Take ``batch_size`` fresh groups (dropping stale ones) and train on them.

        ``waited["wait"]`` gets the seconds spent waiting for groups."""
        config = self.config
        await self._set_collecting(step)
        ledger: list[LedgerRow] = []
        slots: list[Slot] = []
        taken = 0

        async def fresh() -> SampledGroup:
            nonlocal taken
            while True:
                started = time.perf_counter()
                item = await self._finished.get()
                if isinstance(item, BaseException):
                    raise item
                slot, sampled = item
                waited["wait"] = waited.get("wait", 0.0) + time.perf_counter() - started
                stale = step - sampled.version > self.max_staleness
                await self._consumed(taken=not stale)
                if stale:
                    ledger.append(LedgerRow(step, slot, sampled.version, GroupOutcome.STALE))
                    self._attempts[slot] += 1
                    self._pending.put_nowait(slot)
                    continue
                slots.append(slot)
                taken += 1
                if taken == config.steps.batch_size:
                    # The batch is complete: a group started from now on can at best join the next step.
                    await self._set_collecting(step + 1)
                return sampled

        if config.steps.stream_minibatches:
            trained = await train_streaming(
                fresh,
                self.learner,
                step,
                batch_size=config.steps.batch_size,
                num_substeps=config.steps.num_substeps,
                minibatches=config.steps.stream_minibatches,
                scale_by_std=config.loss.scale_advantages_by_std,
            )
        else:
            trained = TrainedStep()
            usable = await collect(fresh, config.steps.batch_size, trained)
            trained.assembled = assemble(usable, scale_by_std=config.loss.scale_advantages_by_std)
            trained.row.update(await self.learner.train(step, trained.assembled))
        ledger.extend(
            LedgerRow(step, s, g.version, _outcome(g)) for s, g in zip(slots, trained.taken, strict=True)
        )
        self.ledger.append(ledger)
        trained.row.update(staleness_metrics(step, trained.taken, ledger, self.max_staleness))
        trained.row["async/queued_groups"] = self._finished.qsize()
        return trained


def _outcome(group: SampledGroup) -> GroupOutcome:
    from envsuite.trainers._batches import group_error

    if group_error(group.result) is not None or group.result.group is None:
        return GroupOutcome.FAILED
    rewards = group.result.group.get_total_rewards()
    return GroupOutcome.CONSTANT if compute_advantages(rewards).constant else GroupOutcome.TRAINED


def staleness_metrics(step: int, taken: list[SampledGroup], ledger: list[LedgerRow], bound: int) -> Row:
    """Staleness histogram of the taken groups, dropped groups, and the samplers' versions."""
    staleness = [step - g.version for g in taken]
    versions = [g.version for g in taken]
    row: Row = {
        "async/dropped_groups": sum(r.outcome is GroupOutcome.STALE for r in ledger),
        "async/staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "async/staleness_max": max(staleness, default=0),
        "sampling_client/step_min": min(versions, default=step),
        "sampling_client/step_max": max(versions, default=step),
        "sampling_client/step_mean": sum(versions) / len(versions) if versions else float(step),
    }
    counts = Counter(staleness)
    for k in range(bound + 1):
        row[f"async/staleness/{k}"] = counts.get(k, 0)
    return row


@contextlib.asynccontextmanager
async def async_steps(
    config: TrainConfig,
    service: SamplingService,
    train_data: RLDataset | None,
    learner: Learner,
    log_dir: Path,
    start: int,
) -> AsyncIterator[AsyncSteps | None]:
    """The async stepper for an async config (its sampler loops run inside the block), else None.
    ``train_data`` is None only for runs on captured episodes, which the config keeps synchronous."""
    if config.steps.async_max_steps_off_policy is None:
        yield None
        return
    assert train_data is not None, "TrainConfig.validate refuses async runs on captured episodes"
    steps = AsyncSteps(config, service, train_data, learner, GroupLedger(log_dir / LEDGER_FILE), start)
    service.on_version = steps.notify_version  # replicas that load new weights in the background
    steps.start()
    try:
        yield steps
    finally:
        service.on_version = None
        await steps.stop()
