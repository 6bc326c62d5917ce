"""Where the trainer's groups are sampled: its own sampling client, or sampler replicas.

A :class:`SamplingService` plays one group at a time (:meth:`SamplingService.rollout`) and says which
policy version sampled it: the number of optimizer steps behind the weights. The trainer tells it
about new weights after each step (:meth:`SamplingService.publish`). Two services implement it:

* :class:`DriverSampling` (``samplers=0``, the default): the trainer's own sampling client; env work
  runs on the executor's workers and every policy call comes back to that one client.
* :class:`~envsuite.trainers.async_rl._replicas.ReplicaSampling` (``samplers=N``): N sampler replicas, each
  with its own engine, a copy of the policy and the env work of the groups it plays.

Every group is sampled by a completer seeded from (run seed, stream, step, group index) alone
(:func:`group_seed`), so a group's replies do not depend on which sampler played it or on what ran
beside it: at staleness 0 replicas sample exactly what the trainer's own client samples.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envsuite.core import EnvGroupBuilder
from envsuite.executors import rollout_groups
from envsuite.rollouts import GroupRolloutResult, RolloutLimits
from envsuite.trainers._batches import BatchRollouts, batch_from_results, rollout_batch

if TYPE_CHECKING:
    from envsuite.backends import SamplingClient
    from envsuite.executors import WorkerPool
    from envsuite.trainers._clients import PolicyClients
    from envsuite.trainers._config import TrainConfig

Row = dict[str, float | int | str]


def group_seed(run_seed: int, stream: str, step: int, index: int) -> int:
    """The sampling seed of one group: (run seed, ``stream``, step, index in the batch) and nothing else."""
    from envsuite import episode_seed

    return episode_seed(run_seed, stream, step, index)


@dataclass(frozen=True)
class SamplerSettings:
    """How every sampler samples and plays (plain data: replicas in other processes get a copy)."""

    max_tokens: int
    temperature: float
    limits: RolloutLimits

    @classmethod
    def of(cls, config: TrainConfig) -> SamplerSettings:
        return cls(
            config.sampling.max_tokens,
            config.sampling.temperature,
            RolloutLimits(
                max_turns=config.sampling.max_turns,
                timeout_s=config.sampling.rollout_timeout_s,
                constrain_actions=config.sampling.constrain_actions,
            ),
        )


@dataclass(frozen=True)
class SampledGroup:
    """One played group and where it came from."""

    result: GroupRolloutResult
    version: int
    """The policy version (optimizer steps taken) of the weights that sampled it."""
    seconds: float
    sampler: int = -1
    """The replica that played it (-1: the trainer's own sampling client)."""


class BusyMeter:
    """Wall time during which at least one unit of work was in flight (sampler utilisation)."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._since = time.perf_counter()
        self._busy = 0.0

    def enter(self) -> None:
        self._settle()
        self._in_flight += 1

    def leave(self) -> None:
        self._settle()
        self._in_flight -= 1

    def take(self) -> float:
        """Busy seconds since the last call."""
        self._settle()
        busy, self._busy = self._busy, 0.0
        return busy

    def _settle(self) -> None:
        now = time.perf_counter()
        if self._in_flight > 0:
            self._busy += now - self._since
        self._since = now


class SamplingService(abc.ABC):
    """Plays groups with the newest weights it has; told about new weights by :meth:`publish`."""

    def __init__(self) -> None:
        self.meter = BusyMeter()
        self.on_version: Callable[[], Awaitable[None]] | None = None
        """Called when new weights are in use (the async trainer wakes its sampler loops)."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """The version a group started now is sampled with."""

    @abc.abstractmethod
    async def publish(self, version: int) -> None:
        """New weights (``version`` optimizer steps taken); returns once new groups sample with them."""

    @abc.abstractmethod
    async def _play(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        """Play one group with the current weights."""

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        """Play one group (its members concurrently) with the newest weights, seeded by ``seed``."""
        self.meter.enter()
        try:
            return await self._play(builder, seed)
        finally:
            self.meter.leave()

    async def rollout_batch(
        self, builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int]
    ) -> BatchRollouts:
        """Every group of a batch at once (a batching sampler sees all their requests together)."""
        started = time.perf_counter()
        done = await asyncio.gather(*(self.rollout(b, s) for b, s in zip(builders_P, seeds_P, strict=True)))
        return batch_from_results([d.result for d in done], time.perf_counter() - started)

    async def settle(self) -> None:  # noqa: B027 (a hook: nothing to wait for by default)
        """Wait until the last published weights are in use (they are at once, unless said otherwise)."""

    def metrics(self) -> Row:
        """Counters since the last call (replicas lost, groups retried, ...); empty by default."""
        return {}

    async def close(self) -> None:  # noqa: B027 (a hook: nothing to let go by default)
        """Let every sampler go."""


class DriverSampling(SamplingService):
    """The trainer's own sampling client; env work on ``pool``'s workers (or here, in process).

    Synchronous training lets the old client go before the next snapshot is built (two snapshots, a
    model copy each locally, never coexist). With ``overlap`` (async training) groups still in flight
    keep the client they started with, which closes once the last of them finishes.
    """

    def __init__(
        self, clients: PolicyClients, pool: WorkerPool | None, settings: SamplerSettings, *, overlap: bool
    ) -> None:
        super().__init__()
        self._clients = clients
        self._pool = pool
        self._settings = settings
        self._overlap = overlap
        self._client: SamplingClient | None = None
        self._version = 0
        self._users: dict[int, int] = {}
        """In-flight groups per client (by id), for clients retired while still in use."""
        self._retired: dict[int, SamplingClient] = {}

    @property
    def version(self) -> int:
        return self._version

    async def publish(self, version: int) -> None:
        if not self._overlap:
            self._client = None  # the refresh below must find the old snapshot unreferenced
            self._client = await self._clients.refresh_sampler()
        else:
            new = await self._clients.new_sampler()
            old, self._client = self._client, new
            if old is not None:
                self._retire(old)
        self._version = version

    async def _play(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        from envsuite.completers import SamplingTokenCompleter

        client, version = self._client, self._version
        if client is None:
            raise RuntimeError("the trainer has no sampler yet")
        key = id(client)
        self._users[key] = self._users.get(key, 0) + 1
        started = time.perf_counter()
        try:
            policy = SamplingTokenCompleter(
                client,
                max_tokens=self._settings.max_tokens,
                temperature=self._settings.temperature,
                seed=seed,
            )
            [result] = await rollout_groups(self._pool, [builder], policy, self._settings.limits)
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                retired = self._retired.pop(key, None)
                if retired is not None:
                    _close(retired)
        return SampledGroup(result, version, time.perf_counter() - started)

    async def rollout_batch(
        self, builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int]
    ) -> BatchRollouts:
        # One rollout_batch over every group: the remote pool gets the whole batch at once.
        from envsuite.completers import SamplingTokenCompleter

        if self._client is None:
            raise RuntimeError("the trainer has no sampler yet")
        policies = [
            SamplingTokenCompleter(
                self._client,
                max_tokens=self._settings.max_tokens,
                temperature=self._settings.temperature,
                seed=seed,
            )
            for seed in seeds_P
        ]
        self.meter.enter()
        try:
            return await rollout_batch(builders_P, policies, self._settings.limits, self._pool)
        finally:
            self.meter.leave()

    async def close(self) -> None:
        for client in self._retired.values():
            _close(client)
        self._retired.clear()
        if self._overlap and self._client is not None:
            _close(self._client)
        self._client = None

    def _retire(self, client: SamplingClient) -> None:
        if self._users.get(id(client), 0) == 0:
            _close(client)
        else:
            self._retired[id(client)] = client


def _close(client: object) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        close()
