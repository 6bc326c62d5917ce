"""Futures of the local backend: the Tinker SDK's own awaitable future over a ``concurrent.futures.Future``.

Every local client method returns a :data:`LocalFuture`, so callers use it exactly like the hosted
client's ``APIFuture``: ``fut.result(timeout)`` from blocking code, ``await fut`` or
``await fut.result_async(timeout)`` from async code. Cancelling the wrapped future (or the asyncio task
awaiting it) cancels the operation while it is still queued or running in the sampling engine.
Calls that make a client return the SDK's back-compat future of it (``LocalTrainingClientFuture``,
``LocalSamplingClientFuture``, beside the clients).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import ParamSpec, TypeAlias, TypeVar

from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

T = TypeVar("T")
P = ParamSpec("P")

LocalFuture: TypeAlias = AwaitableConcurrentFuture
"""The future type every local client method returns (generic: ``LocalFuture[SampleResponse]``)."""


def completed_future(value: T) -> AwaitableConcurrentFuture[T]:
    """A future that already holds ``value`` (for operations that finish synchronously)."""
    inner: concurrent.futures.Future[T] = concurrent.futures.Future()
    inner.set_result(value)
    return AwaitableConcurrentFuture(inner)


def failed_future(error: BaseException) -> AwaitableConcurrentFuture[T]:
    """A future that already holds ``error`` (raised by ``result()`` and by ``await``)."""
    inner: concurrent.futures.Future[T] = concurrent.futures.Future()
    inner.set_exception(error)
    return AwaitableConcurrentFuture(inner)


def submit(
    executor: concurrent.futures.Executor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> AwaitableConcurrentFuture[T]:
    """Run ``fn(*args, **kwargs)`` on ``executor`` and return its awaitable future."""
    return AwaitableConcurrentFuture(executor.submit(fn, *args, **kwargs))
