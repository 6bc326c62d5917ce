"""Sampler replicas: N samplers, each with its own engine, a copy of the policy and its groups' env work.

``samplers=N`` gives the trainer a :class:`ReplicaSampling`: N replicas of the executor's kind, in this
process (``inprocess``), in spawned processes (``process``), or as Ray actors (``ray``, on the cluster
at ``ray_address`` when given: one actor per node first, ``SPREAD``). Each replica loads the base model
once; after each optimizer step the trainer saves its sampling weights (LoRA: the adapter only, a few
MB, never the base model) and every replica loads them as the next policy version, merging the
adapter into its own copy of the base weights. A group goes to the least busy live replica, which
makes the group's envs, plays them against its own engine, and returns the trajectories with the
version that sampled them: env work goes with the sampler that plays it, and nothing comes back to the
trainer per turn.

A replica that dies (its process killed, its Ray node gone) fails its groups in flight; each is played
again on another live replica (``replicas/retried_groups``), the dead one is counted
(``replicas/lost``) and never used again. When none is left the run stops (``StopCause.SAMPLERS_LOST``,
its trained steps saved). Replicas are not restarted: on a cluster, the capacity they held is gone
with them. The trainer's side (:class:`~envsuite.trainers.async_rl._replica_sampling.ReplicaSampling`) is
beside this module.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from envsuite.core import EnvGroupBuilder
from envsuite.executors import ExecutorConfig, ExecutorKind
from envsuite.rollouts import GroupRolloutResult, do_group_rollout
from envsuite.trainers._clients import SamplerWeights
from envsuite.trainers.async_rl._samplers import SamplerSettings

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from ray.actor import ActorHandle

    from envsuite.backends.local import LocalSamplingClient

RemoteCall = Callable[..., Awaitable[object]]
"""A call into a replica over the channel or Ray; what comes back is checked (:func:`_seconds`, :func:`_played`)."""

START_TIMEOUT_S = 300.0
"""How long a replica may take to start (spawn, imports) before the run gives up on it."""


class ReplicaLostError(RuntimeError):
    """The replica's process or actor is gone."""


class NoSamplersLeftError(RuntimeError):
    """Every sampler replica died; the run cannot sample any more."""


# --------------------------------------------------------------------------------------------------
# The replica itself (runs wherever the replica lives)
# --------------------------------------------------------------------------------------------------


class ReplicaCore:
    """One sampler: the base model loaded once, the current policy version's engine, and rollouts."""

    def __init__(self, settings: SamplerSettings, device: str | None = None) -> None:
        self.settings = settings
        self.device = device
        self.version = -1
        self._client: LocalSamplingClient | None = None
        from envsuite.backends.local import ReplicaWeights  # torch: only where a replica runs

        self._weights = ReplicaWeights(device)
        self._users: dict[int, int] = {}
        self._retired: dict[int, LocalSamplingClient] = {}

    async def ready(self) -> bool:
        return True

    async def update(self, version: int, weights: SamplerWeights) -> float:
        """Load ``weights`` as policy ``version`` (older versions are ignored); returns seconds taken."""
        if version <= self.version:
            return 0.0
        started = time.perf_counter()
        client = await asyncio.to_thread(self._weights.client, weights.files)
        old, self._client, self.version = self._client, client, version
        if old is not None:
            if self._users.get(id(old), 0):
                self._retired[id(old)] = old  # groups still playing on it keep it until they end
            else:
                old.close()
        return time.perf_counter() - started

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]:
        """Play one group on this replica's engine; returns it and the version that sampled it."""
        from envsuite.completers import SamplingTokenCompleter

        client, version = self._client, self.version
        if client is None:
            raise RuntimeError("this sampler replica has no weights yet")
        key = id(client)
        self._users[key] = self._users.get(key, 0) + 1
        try:
            policy = SamplingTokenCompleter(
                client, max_tokens=self.settings.max_tokens, temperature=self.settings.temperature, seed=seed
            )
            result = await do_group_rollout(builder, policy, self.settings.limits)
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                retired = self._retired.pop(key, None)
                if retired is not None:
                    retired.close()
        return result, version

    def close(self) -> None:
        for client in [self._client, *self._retired.values()]:
            if client is not None:
                client.close()
        self._client = None
        self._retired.clear()


# --------------------------------------------------------------------------------------------------
# Handles: the trainer's side of one replica
# --------------------------------------------------------------------------------------------------


class ReplicaHandle(abc.ABC):
    """One replica as the trainer sees it (calls raise :class:`ReplicaLostError` once it is gone)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.in_flight = 0
        self.alive = True
        self.version = -1

    @abc.abstractmethod
    async def start(self) -> None: ...

    def where(self) -> str:
        """Where it runs, for the run's log."""
        return "in the trainer's process"

    @abc.abstractmethod
    async def update(self, version: int, weights: SamplerWeights) -> float: ...

    @abc.abstractmethod
    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


class InProcessReplica(ReplicaHandle):
    """A replica in the trainer's process: its own engine (thread); env work on the trainer's loop."""

    def __init__(self, index: int, settings: SamplerSettings) -> None:
        super().__init__(index)
        self.core = ReplicaCore(settings)

    async def start(self) -> None:
        return None

    async def update(self, version: int, weights: SamplerWeights) -> float:
        return await self.core.update(version, weights)

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]:
        return await self.core.rollout(builder, seed)

    async def close(self) -> None:
        self.core.close()


class ProcessReplica(ReplicaHandle):
    """A replica in a spawned process; calls travel over envsuite's callback channel (loopback)."""

    def __init__(self, index: int, settings: SamplerSettings, threads: int = 0) -> None:
        super().__init__(index)
        self.settings = settings
        self.threads = threads
        """Torch threads in the process (0: torch's default, every core)."""
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._calls: dict[str, RemoteCall] = {}

    async def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = self._process = context.Process(
            target=serve_replica_process,
            args=(child, self.settings, self.threads),
            name=f"envsuite-sampler-{self.index}",
        )
        process.start()
        child.close()
        self._conn = parent
        self._calls = await asyncio.to_thread(_receive_handles, parent, process, START_TIMEOUT_S)

    async def update(self, version: int, weights: SamplerWeights) -> float:
        return _seconds(await self._call("update", version, weights))

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]:
        return _played(await self._call("rollout", builder, seed))

    async def _call(self, name: str, *args: object) -> object:
        from envsuite.executors import ChannelClosedError

        try:
            return await self._calls[name](*args)
        except ChannelClosedError as exc:
            raise ReplicaLostError(f"sampler process {self.index} is gone: {exc}") from exc

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()  # the child sees EOF and exits
        if self._process is not None:
            await asyncio.to_thread(self._process.join, 30)
            if self._process.is_alive():
                self._process.kill()
                await asyncio.to_thread(self._process.join, 10)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def where(self) -> str:
        return f"process {self.pid}"


def _seconds(value: object) -> float:
    """A replica's ``update`` answer (seconds taken), checked."""
    if not isinstance(value, int | float):
        raise TypeError(f"a sampler replica's update returned {type(value).__name__}, not seconds")
    return float(value)


def _played(value: object) -> tuple[GroupRolloutResult, int]:
    """A replica's ``rollout`` answer (the group and the version that sampled it), checked."""
    match value:
        case (GroupRolloutResult() as result, int() as version):
            return result, version
    raise TypeError(f"a sampler replica's rollout returned {type(value).__name__}, not (group, version)")


def _receive_handles(conn: Connection, process: BaseProcess, timeout_s: float) -> dict[str, RemoteCall]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if conn.poll(0.2):
            handles: dict[str, RemoteCall] = conn.recv()
            return handles
        if not process.is_alive():
            raise ReplicaLostError(f"the sampler process exited while starting (code {process.exitcode})")
    raise ReplicaLostError(f"the sampler process did not start within {timeout_s:.0f} s")


def serve_replica_process(conn: Connection, settings: SamplerSettings, threads: int = 0) -> None:
    """A sampler process's entry point: serve a :class:`ReplicaCore` until the trainer lets go."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
    asyncio.run(_serve_replica(conn, settings))


async def _serve_replica(conn: Connection, settings: SamplerSettings) -> None:
    from envsuite.executors import CallbackServer

    loop = asyncio.get_running_loop()
    core = ReplicaCore(settings)
    server = CallbackServer(loop)
    conn.send({"update": server.expose(core.update), "rollout": server.expose(core.rollout)})
    gone = asyncio.Event()
    # The trainer closes its end of the pipe when it is done (or dies): that is the signal to stop.
    threading.Thread(target=_wait_eof, args=(conn, loop, gone), daemon=True).start()
    try:
        await gone.wait()
    finally:
        server.close()
        core.close()


def _wait_eof(conn: Connection, loop: asyncio.AbstractEventLoop, gone: asyncio.Event) -> None:
    with contextlib.suppress(EOFError, OSError):
        while True:
            conn.recv()
    loop.call_soon_threadsafe(gone.set)


class RayReplicaActor:
    """The Ray actor around a :class:`ReplicaCore` (async methods: many groups play at once)."""

    def __init__(self, settings: SamplerSettings) -> None:
        self.core = ReplicaCore(settings)

    async def ready(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def update(self, version: int, weights: SamplerWeights) -> float:
        return await self.core.update(version, weights)

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]:
        return await self.core.rollout(builder, seed)


class RayReplica(ReplicaHandle):
    """A replica as a Ray actor (one CPU; spread over the cluster's nodes)."""

    def __init__(self, index: int, settings: SamplerSettings) -> None:
        super().__init__(index)
        self.settings = settings
        self._actor: ActorHandle[RayReplicaActor] | None = None
        self.node_id = ""

    async def start(self) -> None:
        import ray
        from ray.actor import ActorHandle

        actor_class = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(RayReplicaActor)
        actor = actor_class.options(scheduling_strategy="SPREAD").remote(self.settings)
        if not isinstance(actor, ActorHandle):  # Ray's stubs also allow the class itself here
            raise TypeError(f"ray.remote(...).remote() returned {type(actor).__name__}, not an actor handle")
        self._actor = actor
        try:
            self.node_id = str(await asyncio.wait_for(self._call(actor.ready.remote), START_TIMEOUT_S))
        except TimeoutError:
            raise ReplicaLostError(
                f"sampler actor {self.index} found no node with a free CPU within {START_TIMEOUT_S:.0f} s "
                "(each replica needs one: ask for fewer --samplers, or add nodes)"
            ) from None

    def where(self) -> str:
        return f"Ray actor on node {self.node_id[:12]}"

    async def update(self, version: int, weights: SamplerWeights) -> float:
        return _seconds(await self._call(self._started().update.remote, version, weights))

    async def rollout(self, builder: EnvGroupBuilder, seed: int) -> tuple[GroupRolloutResult, int]:
        return _played(await self._call(self._started().rollout.remote, builder, seed))

    def _started(self) -> ActorHandle[RayReplicaActor]:
        if self._actor is None:
            raise ReplicaLostError(f"sampler actor {self.index} is not running")
        return self._actor

    async def _call(self, method: RemoteCall, *args: object) -> object:
        import ray.exceptions

        try:
            return await method(*args)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            raise ReplicaLostError(f"sampler actor {self.index} is gone: {exc}") from exc

    async def close(self) -> None:
        import ray

        if self._actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(self._actor)
            self._actor = None


async def open_replicas(
    config: ExecutorConfig, n: int, settings: SamplerSettings
) -> tuple[list[ReplicaHandle], Callable[[], None]]:
    """Start ``n`` replicas of ``config``'s kind; returns them and what to call once they are closed."""
    done: Callable[[], None] = _nothing
    if config.kind is ExecutorKind.INPROCESS:
        replicas: list[ReplicaHandle] = [InProcessReplica(i, settings) for i in range(n)]
    elif config.kind is ExecutorKind.PROCESS:
        # Each process gets its share of the cores (Ray gives its 1-CPU actors one thread the same way).
        threads = max(1, (os.cpu_count() or 1) // n)
        replicas = [ProcessReplica(i, settings, threads) for i in range(n)]
    else:
        done = _ensure_ray(config.ray_address, n)
        replicas = [RayReplica(i, settings) for i in range(n)]
    try:
        await asyncio.gather(*(r.start() for r in replicas))
    except BaseException as exc:
        await asyncio.gather(*(r.close() for r in replicas), return_exceptions=True)
        done()
        if isinstance(exc, ReplicaLostError):
            from envsuite.trainers._config import ConfigError

            raise ConfigError(f"could not start {n} sampler replicas: {exc}") from exc
        raise
    return replicas, done


def _nothing() -> None:
    return None


def _ensure_ray(address: str | None, n: int) -> Callable[[], None]:
    """Ray for the actors: the running one if any, else started here (and shut down by the callback)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("sampler replicas on Ray need Ray: pip install 'envsuite[ray]'") from exc
    if ray.is_initialized():
        return _nothing
    if address is not None:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(num_cpus=n, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    return ray.shutdown
