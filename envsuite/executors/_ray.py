"""A ``concurrent.futures.Executor`` over Ray tasks, with at most ``workers`` in flight.

Ray is imported only here (the ``envsuite[ray]`` extra). If Ray is already initialized in this process
(a test session, a user's own ``ray.init``) the executor uses it and leaves it running; otherwise it
starts one (``ray.init(address=...)`` for a cluster, else a local Ray with ``workers`` CPUs) and shuts
it down with the executor.
"""

from __future__ import annotations

import collections
import functools
import threading
from concurrent.futures import Executor, Future
from typing import Any


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


class RayExecutor(Executor):
    """Submits each call as a Ray task; ``ref.future()`` bridges Ray's result to the returned future."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ImportError("the ray executor needs Ray: pip install 'envsuite[ray]'") from exc
        self.workers = workers
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if address is not None:
                ray.init(address=address)
            else:
                ray.init(num_cpus=workers, include_dashboard=False)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_call)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: collections.deque[tuple[Future[Any], Any, tuple[Any, ...], dict[str, Any]]] = (
            collections.deque()
        )
        self._in_flight = 0
        self._shutdown = False

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        outer: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a RayExecutor after shutdown")
            self._pending.append((outer, fn, args, kwargs))
        self._dispatch()
        return outer

    def _dispatch(self) -> None:
        """Start queued calls while fewer than ``workers`` run (a slot frees when a task ends)."""
        while True:
            with self._lock:
                if not self._pending or self._in_flight >= self.workers:
                    return
                outer, fn, args, kwargs = self._pending.popleft()
                self._in_flight += 1
            if not outer.set_running_or_notify_cancel():
                self._release()
                continue
            try:
                inner = self._remote.remote(fn, args, kwargs).future()
            except BaseException as exc:
                outer.set_exception(exc)
                self._release()
                continue
            inner.add_done_callback(functools.partial(self._finish, outer))

    def _finish(self, outer: Future[Any], inner: Future[Any]) -> None:
        exc = inner.exception()
        if exc is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(inner.result())
        self._release()
        self._dispatch()

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._idle.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            dropped = list(self._pending) if cancel_futures else []
            if cancel_futures:
                self._pending.clear()
        for outer, *_ in dropped:
            outer.cancel()
        if wait:
            with self._idle:
                self._idle.wait_for(lambda: self._in_flight == 0 and not self._pending)
        if self._owns_ray:
            import ray

            ray.shutdown()
