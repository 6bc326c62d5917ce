"""The trainer's groups sampled on a vLLM server (``sampler="vllm"``), the learner staying local.

After each optimizer step :meth:`VllmSampling.publish` saves the LoRA adapter (the local backend's
sampler weights), writes it as a peft adapter and loads it into vLLM as ``policy-v{version}``; groups
started after that sample under that name, and every reply is checked to come from it
(:class:`~envsuite.backends.vllm.VllmVersionMismatch` otherwise), so the version a group records is the
one that sampled it. Synchronous training also checks that every group of a step carries that step's
version. Older versions are unloaded once no group in flight uses them (async training keeps them).

A server that dies mid-run (killed, crashed) fails the requests in flight; each group that lost one is
played again from scratch once the server is back (``vllm/retried_groups``): one envsuite started is
restarted (``vllm/restarts``) and given the current adapter again; one the user runs (``vllm_url``) is
waited for. When it cannot be brought back the run stops with its trained steps saved
(:class:`~envsuite.trainers.async_rl.NoSamplersLeftError`), to resume later: never a lost run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.backends.vllm import (
    VllmConnectionError,
    VllmEndpoint,
    VllmSamplingClient,
    VllmServer,
    VllmStartError,
    write_peft_adapter,
)
from envsuite.core import EnvGroupBuilder, Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.executors import rollout_groups
from envsuite.trainers._batches import BatchRollouts, batch_from_results
from envsuite.trainers._report import LOGGER
from envsuite.trainers.async_rl._replicas import NoSamplersLeftError
from envsuite.trainers.async_rl._samplers import Row, SampledGroup, SamplerSettings, SamplingService

if TYPE_CHECKING:
    from envsuite.executors import WorkerPool
    from envsuite.trainers._clients import PolicyClients

MAX_RECOVERIES = 3
"""Times one group may find the server gone before the run stops (saved)."""
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``--max-lora-rank`` values vLLM takes; the server gets the smallest that holds the run's rank."""
EXTERNAL_WAIT_S = 300.0
"""How long a user's server (``vllm_url``) may stay unreachable before the run stops (saved)."""


def adapter_name(version: int) -> str:
    """The name policy ``version`` (optimizer steps taken) is loaded under in vLLM."""
    return f"policy-v{version}"


@dataclass
class _Watch:
    """What went wrong with the server while one group played (its errors end episodes, not the run)."""

    lost: str | None = None


@dataclass
class _WatchedPolicy(TokenCompleter):
    """A policy that notes a lost server before the rollout driver turns the error into an episode's end."""

    inner: TokenCompleter
    watch: _Watch = field(default_factory=_Watch)

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        try:
            return await self.inner(model_input, stop, max_tokens=max_tokens)
        except VllmConnectionError as exc:
            self.watch.lost = str(exc)
            raise


async def rollout_batch_at_version(
    service: SamplingService, builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int]
) -> BatchRollouts:
    """Every group of a synchronous step on ``service``, each checked to be sampled by the version
    published for the step (one server's or a replica set's)."""
    started = time.perf_counter()
    expected = service.version
    done = await asyncio.gather(*(service.rollout(b, s) for b, s in zip(builders_P, seeds_P, strict=True)))
    stale = sorted({d.version for d in done if d.version != expected})
    if stale:
        raise RuntimeError(
            f"groups sampled by {[adapter_name(v) for v in stale]}, not {adapter_name(expected)}"
        )
    return batch_from_results([d.result for d in done], time.perf_counter() - started)


class VllmSampling(SamplingService):
    """Plays each group against a vLLM server (started here, or at ``url``) under the newest LoRA version."""

    def __init__(
        self,
        clients: PolicyClients,
        pool: WorkerPool | None,
        settings: SamplerSettings,
        *,
        base_model: str,
        adapter_dir: Path,
        server: VllmServer | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__()
        if (server is None) == (url is None):
            raise ValueError("give a server to start or the URL of a running one, not both")
        self._clients = clients
        self._pool = pool
        self._settings = settings
        self._base_model = base_model
        self._adapter_dir = adapter_dir
        self._server = server
        self._url = url or ""
        self._version = -1
        self._loaded: dict[int, Path] = {}
        self._users: dict[int, int] = {}
        self._generation = 0
        """Bumped by each recovery, so concurrent groups that saw the same failure recover once."""
        self._recovering = asyncio.Lock()
        self._counters = {"vllm/retried_groups": 0, "vllm/restarts": 0, "vllm/publish_s": 0.0}
        self._sampled: list[int] = []
        """The version of each group played since the last :meth:`metrics`."""

    @property
    def version(self) -> int:
        return self._version

    @property
    def url(self) -> str:
        return self._url

    async def start(self) -> None:
        if self._server is not None:
            self._url = await asyncio.to_thread(self._server.start)
            LOGGER.info("vLLM server at %s up in %.1f s", self._url, self._server.start_seconds)

    async def publish(self, version: int) -> None:
        started = time.perf_counter()
        weights = await self._clients.sampler_weights()
        from envsuite.models import resolve_model

        base_path = str(resolve_model(self._base_model).path)
        path = self._adapter_dir / adapter_name(version)
        await asyncio.to_thread(write_peft_adapter, weights.files, path, base_path)
        await self._with_server(lambda: self._load(version, path))
        self._version = version
        await self._unload_unused()
        self._counters["vllm/publish_s"] += time.perf_counter() - started
        if self.on_version is not None:
            await self.on_version()

    async def _load(self, version: int, path: Path) -> None:
        await VllmEndpoint(self._url).load_adapter(adapter_name(version), str(path))
        self._loaded[version] = path

    async def _unload_unused(self) -> None:
        for version in [v for v in self._loaded if v != self._version and not self._users.get(v)]:
            path = self._loaded.pop(version)
            with contextlib.suppress(VllmConnectionError):
                await VllmEndpoint(self._url).unload_adapter(adapter_name(version))
            shutil.rmtree(path, ignore_errors=True)

    async def _play(self, builder: EnvGroupBuilder, seed: int) -> SampledGroup:
        from envsuite.completers import SamplingTokenCompleter

        started = time.perf_counter()
        for attempt in range(MAX_RECOVERIES + 1):
            version, generation = self._version, self._generation
            if version < 0:
                raise RuntimeError("the trainer has published no policy to vLLM yet")
            client = VllmSamplingClient(self._url, adapter_name(version), self._base_model)
            policy = _WatchedPolicy(
                SamplingTokenCompleter(
                    client,
                    max_tokens=self._settings.max_tokens,
                    temperature=self._settings.temperature,
                    seed=seed,
                )
            )
            self._users[version] = self._users.get(version, 0) + 1
            try:
                [result] = await rollout_groups(self._pool, [builder], policy, self._settings.limits)
            finally:
                self._users[version] -= 1
            if policy.watch.lost is None:
                self._sampled.append(version)
                return SampledGroup(result, version, time.perf_counter() - started)
            LOGGER.warning("vLLM lost mid-group (attempt %d): %s", attempt + 1, policy.watch.lost)
            self._counters["vllm/retried_groups"] += 1
            await self._recover(generation)
        raise NoSamplersLeftError(f"the vLLM server failed {MAX_RECOVERIES + 1} times in one group")

    async def rollout_batch(
        self, builders_P: Sequence[EnvGroupBuilder], seeds_P: Sequence[int]
    ) -> BatchRollouts:
        """Every group of a synchronous step, each checked to be sampled by the step's version."""
        return await rollout_batch_at_version(self, builders_P, seeds_P)

    async def _with_server(self, call: Callable[[], Awaitable[None]]) -> None:
        """``call`` against the server, recovering it (then calling again) when it is gone."""
        for _ in range(MAX_RECOVERIES):
            generation = self._generation
            try:
                await call()
                return
            except VllmConnectionError as exc:
                LOGGER.warning("vLLM unreachable: %s", exc)
                await self._recover(generation)
        raise NoSamplersLeftError(f"the vLLM server failed {MAX_RECOVERIES} times in a row")

    async def _recover(self, generation: int) -> None:
        """Bring the server back (once for every group that saw the same failure) with the current version."""
        async with self._recovering:
            if self._generation != generation:
                return
            try:
                if self._server is not None:
                    self._url = await asyncio.to_thread(self._server.restart)
                    self._counters["vllm/restarts"] += 1
                    LOGGER.warning("vLLM restarted at %s in %.1f s", self._url, self._server.start_seconds)
                else:
                    await self._wait_for_external()
            except VllmStartError as exc:
                raise NoSamplersLeftError(f"the vLLM server could not be restarted: {exc}") from exc
            self._loaded.clear()  # a fresh server holds no adapter
            if self._version >= 0:
                path = self._adapter_dir / adapter_name(self._version)
                await VllmEndpoint(self._url).load_adapter(adapter_name(self._version), str(path))
                self._loaded[self._version] = path
            self._generation += 1

    async def _wait_for_external(self) -> None:
        endpoint = VllmEndpoint(self._url)
        deadline = time.monotonic() + EXTERNAL_WAIT_S
        while not await endpoint.healthy():
            if time.monotonic() > deadline:
                raise NoSamplersLeftError(
                    f"the vLLM server at {self._url} did not come back in {EXTERNAL_WAIT_S:.0f} s"
                )
            await asyncio.sleep(2.0)

    def metrics(self) -> Row:
        """Counters since the last call; ``vllm/sampled_version_{min,max}``: the versions that sampled
        the groups played since then; ``vllm/published_version``: the newest one loaded."""
        row: Row = {**self._counters, "vllm/published_version": self._version}
        if self._sampled:
            row["vllm/sampled_version_min"] = min(self._sampled)
            row["vllm/sampled_version_max"] = max(self._sampled)
        self._counters = {"vllm/retried_groups": 0, "vllm/restarts": 0, "vllm/publish_s": 0.0}
        self._sampled = []
        return row

    async def close(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)
