"""Several vLLM servers behind one trainer (``sampler="vllm"`` with ``samplers`` N, or ``vllm_url`` listing
N URLs): the learner stays local and publishes each LoRA version to every replica.

Each replica is a :class:`~envsuite.trainers.async_rl._vllm_sampling.VllmSampling` (its own server or
URL, its own adapter folder, its own restart-and-retry on a lost server). A group plays on the live
replica with the fewest groups in flight (ties: the lowest index), so a batch spreads over the servers
and a slow one gets less. Every version is loaded into every live replica before :meth:`publish`
returns, so a group records the version that sampled it whichever replica played it. A replica that
cannot be brought back (its :class:`NoSamplersLeftError`) is dropped and its group played again on
another; the run stops (saved) only when none is left.

:func:`open_vllm_sampling` builds the run's vLLM sampling: one :class:`VllmSampling`, or a
:class:`VllmReplicaSet` of several.

Invariants: ``version`` is the newest version every live replica holds; ``vllm/replica/<i>/groups``
counts the groups replica ``i`` finished since the last :meth:`metrics`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.backends.vllm import VllmServer, VllmServerSettings
from envsuite.core import EnvGroupBuilder
from envsuite.trainers._batches import BatchRollouts
from envsuite.trainers._report import LOGGER
from envsuite.trainers.async_rl._replicas import NoSamplersLeftError
from envsuite.trainers.async_rl._samplers import Row, SampledGroup, SamplerSettings, SamplingService
from envsuite.trainers.async_rl._vllm_sampling import (
    VLLM_LORA_RANKS,
    VllmSampling,
    rollout_batch_at_version,
)

if TYPE_CHECKING:
    from envsuite.executors import WorkerPool
    from envsuite.trainers._clients import PolicyClients
    from envsuite.trainers._config import TrainConfig


class VllmReplicaSet(SamplingService):
    """Plays each group on one of several vLLM replicas; publishes every version to all of them."""

    def __init__(self, replicas: Sequence[VllmSampling]) -> None:
        super().__init__()
        if len(replicas) < 2:
            raise ValueError("a replica set needs at least two vLLM samplers (one is a VllmSampling)")
        self._replicas = list(replicas)
        self._live = list(range(len(replicas)))
        self._in_flight = [0] * len(replicas)
        self._groups = [0] * len(replicas)
        self._dropped = 0

    @property
    def version(self) -> int:
        return min(self._replicas[i].version for i in self._live)

    async def start(self) -> None:
        await asyncio.gather(*(replica.start() for replica in self._replicas))

    async def publish(self, version: int) -> None:
        outcomes = await asyncio.gather(
            *(self._replicas[i].publish(version) for i in self._live), return_exceptions=True
        )
        for index, outcome in zip(list(self._live), outcomes, strict=True):
            if isinstance(outcome, NoSamplersLeftError):
                self._drop(index, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        if self.on_version is not None:
            await self.on_version()

    def _drop(self, index: int, why: BaseException) -> None:
        if index in self._live:
            self._live.remove(index)
            self._dropped += 1
            LOGGER.warning("vLLM replica %d dropped (%s); %d left", index, why, len(self._live))
        if not self._live:
            raise NoSamplersLeftError(f"every vLLM replica is gone; the last: {why}") from why

    async def _play(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        while True:
            index = min(self._live, key=lambda i: (self._in_flight[i], i))
            self._in_flight[index] += 1
            try:
                played = await self._replicas[index]._play(builder, seed)
            except NoSamplersLeftError as exc:
                self._drop(index, exc)  # raises when it was the last one
                continue
            finally:
                self._in_flight[index] -= 1
            self._groups[index] += 1
            return SampledGroup(played.result, played.version, played.seconds, sampler=index)

    async def rollout_batch(
        self, builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int]
    ) -> BatchRollouts:
        """Every group of a synchronous step, spread over the replicas, each checked to be sampled by
        the step's version."""
        return await rollout_batch_at_version(self, builders_P, seeds_P)

    def metrics(self) -> Row:
        """The replicas' counters summed, the versions that sampled over all of them, and per replica
        the groups it finished (``vllm/replica/<i>/groups``) since the last call."""
        rows = [replica.metrics() for replica in self._replicas]
        row: Row = {"vllm/replicas_live": len(self._live), "vllm/replicas_dropped": self._dropped}
        for key in ("vllm/retried_groups", "vllm/restarts"):
            row[key] = sum(float(r.get(key, 0)) for r in rows)
        row["vllm/publish_s"] = max(float(r.get("vllm/publish_s", 0)) for r in rows)  # they publish at once
        row["vllm/published_version"] = self.version
        for key, pick in (("vllm/sampled_version_min", min), ("vllm/sampled_version_max", max)):
            values = [r[key] for r in rows if key in r]
            if values:
                row[key] = pick(values)
        for index, groups in enumerate(self._groups):
            row[f"vllm/replica/{index}/groups"] = groups
        self._groups = [0] * len(self._replicas)
        return row

    async def close(self) -> None:
        await asyncio.gather(*(replica.close() for replica in self._replicas), return_exceptions=True)


def open_vllm_sampling(
    config: TrainConfig, clients: PolicyClients, pool: WorkerPool | None, settings: SamplerSettings
) -> VllmSampling | VllmReplicaSet:
    """The run's vLLM sampling: the servers at ``config.replicas.vllm_url`` (one URL or several,
    comma-separated), else ``samplers`` servers started here (one when 0); several make a replica set."""
    urls = config.replicas.vllm_urls()
    count = len(urls) or max(1, config.replicas.samplers)
    adapter_dir = Path(config.log_dir) / "vllm_adapters"
    replicas = [
        VllmSampling(
            clients,
            pool,
            settings,
            base_model=config.policy.model,
            adapter_dir=adapter_dir if count == 1 else adapter_dir / f"replica{index}",
            server=None if urls else VllmServer(_server_settings(config)),
            url=urls[index] if urls else None,
        )
        for index in range(count)
    ]
    return replicas[0] if count == 1 else VllmReplicaSet(replicas)


def _server_settings(config: TrainConfig) -> VllmServerSettings:
    """A vLLM server for the run's model, its context and LoRA rank (the smallest vLLM takes that fits)."""
    return VllmServerSettings(
        model=config.policy.model,
        max_model_len=config.sampling.max_context_tokens + config.sampling.max_tokens,
        max_lora_rank=next((r for r in VLLM_LORA_RANKS if r >= config.policy.lora_rank), VLLM_LORA_RANKS[-1]),
    )
