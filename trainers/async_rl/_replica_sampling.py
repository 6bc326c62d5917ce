"""The trainer's sampling service over sampler replicas, and the choice between it and its own sampler.

:class:`ReplicaSampling` sends each group to the least busy live replica holding the newest policy
version; after each optimizer step the trainer's sampling weights (LoRA: the adapter only) go to every
replica. A replica lost mid-group (process killed, node gone) has its groups played again elsewhere
(``replicas/retried_groups``) and is counted (``replicas/lost``); when none is left the run stops
(``StopCause.SAMPLERS_LOST``). :func:`open_sampling` builds the run's service from its config.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from envsuite.core import EnvGroupBuilder
from envsuite.rollouts import GroupRolloutResult
from envsuite.trainers._clients import SamplerWeights
from envsuite.trainers._report import LOGGER
from envsuite.trainers.async_rl._replicas import (
    NoSamplersLeftError,
    ReplicaHandle,
    ReplicaLostError,
    open_replicas,
)
from envsuite.trainers.async_rl._samplers import (
    DriverSampling,
    Row,
    SampledGroup,
    SamplerSettings,
    SamplingService,
)

if TYPE_CHECKING:
    from envsuite.executors import WorkerPool
    from envsuite.trainers._clients import PolicyClients
    from envsuite.trainers._config import TrainConfig


class ReplicaSampling(SamplingService):
    """Plays each group on the least busy live replica; new weights go to every replica by version.

    ``wait`` (synchronous training): :meth:`publish` returns once every replica holds the new version.
    Otherwise (async) it returns once the weights are saved, and the replicas load them in the
    background (in order), each starting new groups on them as soon as it has.
    """

    def __init__(self, clients: PolicyClients, replicas: list[ReplicaHandle], *, wait: bool) -> None:
        super().__init__()
        self._clients = clients
        self.replicas = replicas
        self._wait = wait
        self._pushing: asyncio.Task[None] | None = None
        self._retried = self._lost = 0
        self._weights_bytes = 0
        self._weights_s = 0.0
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        live = [r.version for r in self.replicas if r.alive]
        return max(live) if live else -1

    async def publish(self, version: int) -> None:
        weights = await self._clients.sampler_weights()
        self._weights_bytes = weights.nbytes
        previous = self._pushing
        self._pushing = asyncio.create_task(self._push(version, weights, previous))
        if self._wait:
            await self.settle()

    async def settle(self) -> None:
        """Wait until the replicas hold the last published version."""
        if self._pushing is not None:
            await self._pushing

    async def _push(self, version: int, weights: SamplerWeights, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        started = time.perf_counter()
        await asyncio.gather(*(self._update(r, version, weights) for r in self.replicas if r.alive))
        self._weights_s += time.perf_counter() - started
        if not any(r.alive for r in self.replicas):
            raise NoSamplersLeftError("every sampler replica died")

    async def _update(self, replica: ReplicaHandle, version: int, weights: SamplerWeights) -> None:
        try:
            await replica.update(version, weights)
        except ReplicaLostError:
            self._mark_lost(replica)
            return
        replica.version = version
        self._changed.set()
        if self.on_version is not None:
            await self.on_version()

    async def _play(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        started = time.perf_counter()
        while True:
            replica = await self._pick()
            replica.in_flight += 1
            try:
                result, version = await replica.rollout(builder, seed)
            except ReplicaLostError:
                self._mark_lost(replica)
                self._retried += 1
                continue
            except Exception as exc:  # the group itself failed in the replica (its builder raised)
                result, version = (
                    GroupRolloutResult(None, f"sampler {replica.index}: {exc!r}"[:2000]),
                    replica.version,
                )
            finally:
                replica.in_flight -= 1
            return SampledGroup(result, version, time.perf_counter() - started, replica.index)

    async def _pick(self) -> ReplicaHandle:
        """The least busy live replica holding the newest version any live replica has."""
        while True:
            live = [r for r in self.replicas if r.alive]
            if not live:
                raise NoSamplersLeftError(
                    "every sampler replica died (their processes were killed or their nodes left the cluster)"
                )
            newest = max(r.version for r in live)
            ready = [r for r in live if r.version == newest and r.version >= 0]
            if ready:
                return min(ready, key=lambda r: (r.in_flight, r.index))
            self._changed.clear()
            await self._changed.wait()

    def _mark_lost(self, replica: ReplicaHandle) -> None:
        if replica.alive:
            replica.alive = False
            self._lost += 1
            self._changed.set()

    def metrics(self) -> Row:
        row: Row = {
            "replicas/alive": sum(r.alive for r in self.replicas),
            "replicas/lost": self._lost,
            "replicas/retried_groups": self._retried,
            "replicas/weights_bytes": self._weights_bytes,
            "replicas/weights_s": self._weights_s,
        }
        self._retried = self._lost = 0
        self._weights_s = 0.0
        return row

    async def close(self) -> None:
        if self._pushing is not None:
            self._pushing.cancel()
            with contextlib.suppress(BaseException):
                await self._pushing
        await asyncio.gather(*(r.close() for r in self.replicas), return_exceptions=True)


@contextlib.asynccontextmanager
async def open_sampling(
    config: TrainConfig, clients: PolicyClients, pool: WorkerPool | None
) -> AsyncIterator[SamplingService]:
    """The run's sampling service: the trainer's own client (``samplers=0``), N replicas, or a vLLM server
    (``sampler="vllm"``)."""
    settings = SamplerSettings.of(config)
    overlap = config.steps.async_max_steps_off_policy is not None
    done: Callable[[], None] = _no_cleanup
    service: SamplingService
    if config.replicas.sampler == "vllm":
        from envsuite.trainers.async_rl._vllm_replicas import open_vllm_sampling

        vllm = open_vllm_sampling(config, clients, pool, settings)
        service = vllm
        try:
            await vllm.start()
        except BaseException:
            await vllm.close()
            raise
    elif config.replicas.samplers == 0:
        service = DriverSampling(clients, pool, settings, overlap=overlap)
    else:
        replicas, done = await open_replicas(config.executor_config(), config.replicas.samplers, settings)
        service = ReplicaSampling(clients, replicas, wait=not overlap)
        LOGGER.info("%d sampler replicas: %s", len(replicas), "; ".join(r.where() for r in replicas))
    try:
        yield service
    finally:
        try:
            await service.close()
        finally:
            done()


def _no_cleanup() -> None:
    return None
