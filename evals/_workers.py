"""The bench's workers: an executor built for one ``envsuite bench`` run, and a pool per event loop.

Inspect runs the eval set on its own event loop, so the :class:`~envsuite.executors.WorkerPool` (whose
callback channel schedules the workers' model turns on that loop) is made lazily, inside the loop, by
the first sample that needs it. :func:`bench_workers` builds the executor, makes it the active one for
the run's solvers, and afterwards closes every pool and shuts the executor down.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Executor

from envsuite.executors import ExecutorConfig, WorkerPool


class _BenchWorkers:
    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.executor: Executor = config.build()
        self._pools: dict[asyncio.AbstractEventLoop, WorkerPool] = {}
        self._lock = threading.Lock()

    def pool(self) -> WorkerPool:
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.get(loop)
            if pool is None:
                pool = WorkerPool(
                    self.executor, host=self.config.resolved_callback_host(), workers=self.config.workers
                )
                self._pools[loop] = pool
            return pool

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close_channel()
        self.executor.shutdown(wait=True)


_active: _BenchWorkers | None = None


def active_pool() -> WorkerPool | None:
    """The running bench's pool for this event loop; None when env work runs in process."""
    return _active.pool() if _active is not None else None


@contextlib.contextmanager
def bench_workers(config: ExecutorConfig) -> Iterator[None]:
    """Make ``config``'s executor the one bench samples play on, for the duration of the block."""
    global _active
    if config.in_process:
        yield
        return
    if _active is not None:
        raise RuntimeError("a bench run with workers is already active in this process")
    _active = _BenchWorkers(config)
    try:
        yield
    finally:
        workers, _active = _active, None
        workers.close()
