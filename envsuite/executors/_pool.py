"""A pool of async env hosts on any ``concurrent.futures.Executor``: the one seam for rollouts and bench.

``open_pool(config)`` gives a :class:`WorkerPool`. In process (the default) ``await pool.run(fn, *args)``
is ``await fn(*args)`` on the driver's loop. Otherwise the pool submits ``workers`` long-running *host*
calls to the executor (spawned processes or Ray tasks). Each host runs its own event loop and pulls
jobs from the driver over the callback channel, running up to ``concurrency`` of them at once, so one
worker steps many envs while their sampling requests wait on the driver. Pulling balances the load:
a host that finishes early takes the next job.

A job is ``(fn, args)``: ``fn`` a module-level async function (it pickles by name), ``args`` plain data
and :class:`Callback` handles from :meth:`WorkerPool.expose` for what must stay in the driver (the
sampler). A job's exception comes back as :class:`JobError`; a host that dies fails its unfinished
jobs with :class:`WorkerLostError` (and is replaced, a bounded number of times), so no caller hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import pickle
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from concurrent.futures import Future as ConcurrentFuture
from dataclasses import dataclass
from typing import Any, TypeVar

from envsuite.executors._channel import Callback, CallbackServer, ChannelClosedError
from envsuite.executors._config import ExecutorConfig, InProcessExecutor

T = TypeVar("T")
DEFAULT_CONCURRENCY = 256
"""Jobs one host runs at once (env work is mostly waiting on the sampler)."""
MAX_HOST_RESTARTS = 3


class JobError(RuntimeError):
    """A job raised in a worker; the message carries the worker-side repr."""


class WorkerLostError(RuntimeError):
    """The worker running a job died (or its executor broke) before the job finished."""


@dataclass(frozen=True)
class _Job:
    job_id: int
    payload: bytes
    """``pickle.dumps((fn, args))``, made in :meth:`WorkerPool.run` so a job that cannot pickle fails
    there, in the caller, with a clear error."""


@dataclass(frozen=True)
class HostSpec:
    """What one host needs: where to pull jobs from and report results to (picklable)."""

    host_id: int
    pull: Callback
    report: Callback
    concurrency: int


class WorkerPool:
    """Runs async jobs in process or on an executor's workers; use :func:`open_pool`."""

    def __init__(self, executor: Executor | None, *, host: str = "127.0.0.1", workers: int = 1) -> None:
        self.executor = executor
        self.remote = executor is not None and not isinstance(executor, InProcessExecutor)
        self.workers = workers
        self._server: CallbackServer | None = None
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._results: dict[int, asyncio.Future[Any]] = {}
        """Each queued job's result, as its worker sent it back (unpickled: ``run``'s ``T`` by contract)."""
        self._assigned: dict[int, set[int]] = {}
        self._pulls: dict[int, set[asyncio.Task[object]]] = {}
        self._host_ids = itertools.count()
        self._host_futures: list[ConcurrentFuture[int]] = []
        self._restarts = 0
        self._ids = itertools.count()
        self._closing = False
        self._loop = asyncio.get_running_loop()
        if self.remote:
            self._server = CallbackServer(self._loop, host)
            self._pull = self._server.expose(self._next_job)
            self._report = self._server.expose(self._job_done)
            for _ in range(workers):
                self._start_host()

    # -- the caller's side ---------------------------------------------------------------------

    def expose(self, fn: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
        """A handle to a driver-side async function that jobs can await (the function itself in process)."""
        if self._server is None:
            return fn
        return self._server.expose(fn)

    def release(self, handle: Callable[..., Awaitable[object]]) -> None:
        if self._server is not None and isinstance(handle, Callback):
            self._server.release(handle)

    async def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """``await fn(*args)``, in a worker when the pool is remote."""
        if not self.remote:
            return await fn(*args)
        if self._closing:
            raise RuntimeError("the worker pool is closed")
        try:
            payload = pickle.dumps((fn, args))
        except Exception as exc:
            raise TypeError(
                f"a job for the {type(self.executor).__name__} workers does not pickle: {exc!r}"
            ) from exc
        job = _Job(next(self._ids), payload)
        result: asyncio.Future[Any] = self._loop.create_future()
        self._results[job.job_id] = result
        await self._queue.put(job)
        try:
            return await result
        finally:
            self._results.pop(job.job_id, None)

    def close_channel(self) -> None:
        """Drop the channel: hosts see it close and return (usable after the pool's loop has ended)."""
        self._closing = True
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Drop the channel, then wait for the host calls to end."""
        self.close_channel()
        for future in self._host_futures:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(future)

    # -- the hosts' side (called through the channel) ------------------------------------------

    async def _next_job(self, host_id: int) -> _Job:
        task = asyncio.current_task()
        assert task is not None
        pulls = self._pulls.setdefault(host_id, set())
        pulls.add(task)
        try:
            job = await self._queue.get()
        finally:
            pulls.discard(task)
        self._assigned.setdefault(host_id, set()).add(job.job_id)
        return job

    async def _job_done(self, host_id: int, job_id: int, ok: bool, value: object) -> None:
        self._assigned.get(host_id, set()).discard(job_id)
        result = self._results.get(job_id)
        if result is None or result.done():
            return
        if ok:
            result.set_result(value)
        else:
            result.set_exception(JobError(str(value)))

    def _start_host(self) -> None:
        assert self.executor is not None
        host_id = next(self._host_ids)  # a restarted host gets a new id: late calls of the old one stay apart
        spec = HostSpec(host_id, self._pull, self._report, DEFAULT_CONCURRENCY)
        try:
            future = self.executor.submit(run_host, spec)
        except Exception as exc:
            self._fail_host(host_id, f"could not start worker {host_id}: {exc!r}")
            return
        self._host_futures.append(future)
        future.add_done_callback(
            lambda done: self._loop.call_soon_threadsafe(self._host_ended, host_id, done)
        )

    def _host_ended(self, host_id: int, done: ConcurrentFuture[int]) -> None:
        if self._closing:
            return
        error = done.exception() if not done.cancelled() else None
        # A dead host's pull may still be waiting on the queue: cancel it, or it would take a job
        # that nobody runs.
        for pull in self._pulls.pop(host_id, set()):
            pull.cancel()
        self._fail_host(host_id, f"worker {host_id} ended: {error!r}")
        if self._restarts < MAX_HOST_RESTARTS * self.workers:
            self._restarts += 1
            self._start_host()
        elif not any(not f.done() for f in self._host_futures):
            self._fail_queued("every worker died and the restart budget is spent")

    def _fail_host(self, host_id: int, message: str) -> None:
        for job_id in self._assigned.pop(host_id, set()):
            result = self._results.get(job_id)
            if result is not None and not result.done():
                result.set_exception(WorkerLostError(message))

    def _fail_queued(self, message: str) -> None:
        while not self._queue.empty():
            job = self._queue.get_nowait()
            result = self._results.get(job.job_id)
            if result is not None and not result.done():
                result.set_exception(WorkerLostError(message))


@contextlib.asynccontextmanager
async def open_pool(
    config: ExecutorConfig | None = None, executor: Executor | None = None
) -> AsyncIterator[WorkerPool]:
    """A pool for ``config`` (built and shut down here) or for a caller-owned ``executor``."""
    config = config or ExecutorConfig()
    owned = executor is None and not config.in_process
    if owned:
        executor = config.build()
    pool = WorkerPool(
        executor,
        host=config.resolved_callback_host() if executor is not None else "127.0.0.1",
        workers=config.workers,
    )
    try:
        yield pool
    finally:
        await pool.close()
        if owned and executor is not None:
            executor.shutdown(wait=True)


# ------------------------------------------------------------------------------------------------
# The host: what runs inside each worker (a process-pool child or a Ray task).
# ------------------------------------------------------------------------------------------------


def run_host(spec: HostSpec) -> int:
    """A worker's entry point: pull and run jobs until the driver closes the channel; returns jobs run."""
    return asyncio.run(_host_main(spec))


async def _host_main(spec: HostSpec) -> int:
    slots = asyncio.Semaphore(spec.concurrency)
    running: set[asyncio.Task[None]] = set()
    count = 0
    while True:
        await slots.acquire()
        try:
            job = await spec.pull(spec.host_id)
        except ChannelClosedError:
            break
        if not isinstance(job, _Job):
            raise TypeError(f"the driver sent {type(job).__name__}, not a job")
        count += 1
        task = asyncio.create_task(_run_job(spec, job))
        running.add(task)
        task.add_done_callback(functools.partial(_job_finished, running, slots))
    if running:
        await asyncio.gather(*running, return_exceptions=True)
    return count


def _job_finished(
    running: set[asyncio.Task[None]], slots: asyncio.Semaphore, task: asyncio.Task[None]
) -> None:
    running.discard(task)
    slots.release()


async def _run_job(spec: HostSpec, job: _Job) -> None:
    try:
        fn, args = pickle.loads(job.payload)
        value = await fn(*args)
        ok = True
    except Exception as exc:
        value, ok = repr(exc)[:2000], False
    with contextlib.suppress(ChannelClosedError):
        try:
            await spec.report(spec.host_id, job.job_id, ok, value)
        except Exception as exc:  # the result did not pickle: report that instead
            if isinstance(exc, ChannelClosedError):
                raise
            await spec.report(spec.host_id, job.job_id, False, f"result could not be sent back: {exc!r}")
