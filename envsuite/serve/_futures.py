"""Server-side futures: every compute call answers with a request id at once; ``retrieve_future`` polls it.

The SDK's protocol: a call returns ``{"request_id": ...}``; the client then POSTs
``/api/v1/retrieve_future`` until it gets the result. Here that request is held open (long poll) up to
``poll_wait_s``; a result comes back as protobuf (``ForwardBackwardOutput``, ``SampleResponse``) or
JSON (everything else), a failure as ``{"error", "category"}``, and an unfinished request as
``{"type": "try_again"}`` (the SDK asks again at once). The SDK retries a request whose HTTP response
it never saw, so a key (session or model, seq id, body digest) maps a repeated request to the id the
first one got instead of running it twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel
from tinker import types

from envsuite.backends.local import CheckpointError, LossInputError, NonFiniteError, UnknownRunError
from envsuite.serve.tinker_api._wire import (
    PROTO_CONTENT_TYPE,
    encode_forward_backward_output,
    encode_sample_response,
)

T = TypeVar("T")
U = TypeVar("U")
_KEEP_RETRIEVED_S = 300.0
"""A result stays retrievable this long after it was first handed out (the SDK may ask again)."""
_KEEP_UNCLAIMED_S = 3600.0
_USER_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    LookupError,
    NotImplementedError,
    LossInputError,
    CheckpointError,
)


def then(future: concurrent.futures.Future[T], fn: Callable[[T], U]) -> concurrent.futures.Future[U]:
    """A future of ``fn(result)``: the server's view of a local result (ids and paths rewritten, records
    kept); it completes only after ``fn`` has run, so a client never sees a result before that."""
    out: concurrent.futures.Future[U] = concurrent.futures.Future()

    def done(source: concurrent.futures.Future[T]) -> None:
        if source.cancelled():
            out.cancel()
        elif (exc := source.exception()) is not None:
            out.set_exception(exc)
        else:
            try:
                out.set_result(fn(source.result()))
            except Exception as exc:
                out.set_exception(exc)

    future.add_done_callback(done)
    return out


@dataclass
class _Entry:
    future: concurrent.futures.Future[Any]
    created: float = field(default_factory=time.monotonic)
    retrieved: float | None = None


@dataclass(frozen=True)
class Reply:
    """What ``retrieve_future`` answers: a body and its content type."""

    body: bytes | dict[str, Any]
    media_type: str = "application/json"


def error_category(exc: BaseException) -> str:
    """The SDK's ``RequestErrorCategory`` value for a failure: the caller's fault, or ours."""
    if isinstance(exc, (NonFiniteError, UnknownRunError, *_USER_ERRORS)):
        return "user"
    return "server"


def encode_result(result: Any) -> Reply:
    """A finished operation's value in the shape the SDK's future reads."""
    if isinstance(result, types.SampleResponse):
        return Reply(encode_sample_response(result), PROTO_CONTENT_TYPE)
    if isinstance(result, types.ForwardBackwardOutput):
        return Reply(encode_forward_backward_output(result), PROTO_CONTENT_TYPE)
    if isinstance(result, BaseModel):
        return Reply(result.model_dump(mode="json", exclude_none=True))
    raise TypeError(f"cannot encode a {type(result).__name__} result")


class FutureRegistry:
    """Request ids -> running or finished operations (thread-safe: results arrive from worker threads)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._by_key: dict[Hashable, str] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self.started = 0
        """Operations started so far (a repeated request counts once)."""

    def start(self, begin: Callable[[], concurrent.futures.Future[Any]], key: Hashable | None = None) -> str:
        """Start an operation (``begin()`` returns its future) and give it a request id.

        A request whose ``key`` was seen before (the SDK retrying a call whose answer it lost) gets the
        first one's id and is not started again. ``begin`` runs under the registry's lock, so it must
        only enqueue work.
        """
        return self.start_with_id(lambda _request_id: begin(), key)

    def start_with_id(
        self, begin: Callable[[str], concurrent.futures.Future[Any]], key: Hashable | None = None
    ) -> str:
        """:meth:`start` for an operation that needs its own request id (``begin(request_id)``)."""
        with self._lock:
            self._purge()
            if key is not None and (known := self._by_key.get(key)) in self._entries:
                return str(known)
            request_id = f"{self._prefix}-{next(self._ids)}"
            try:
                future = begin(request_id)
            except Exception as exc:  # a call refused up front fails in its future, as the SDK's do
                future = concurrent.futures.Future()
                future.set_exception(exc)
            self._entries[request_id] = _Entry(future)
            self.started += 1
            if key is not None:
                self._by_key[key] = request_id
            return request_id

    def cancel(self, request_id: str) -> None:
        with self._lock:
            entry = self._entries.get(request_id)
        if entry is not None:
            entry.future.cancel()

    async def retrieve(self, request_id: str, wait_s: float) -> Reply | None:
        """The result, error or try-again for ``request_id``; None when the id is unknown."""
        with self._lock:
            entry = self._entries.get(request_id)
        if entry is None:
            return None
        try:
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(entry.future)), wait_s)
        except TimeoutError:
            return Reply({"type": "try_again", "request_id": request_id, "queue_state": "active"})
        except asyncio.CancelledError:
            if entry.future.cancelled():
                return Reply({"error": "the request was cancelled", "category": "user"})
            raise
        except Exception as exc:
            self._mark(entry)
            return Reply({"error": f"{type(exc).__name__}: {exc}", "category": error_category(exc)})
        self._mark(entry)
        return encode_result(result)

    def pending(self) -> int:
        with self._lock:
            return sum(not e.future.done() for e in self._entries.values())

    def _mark(self, entry: _Entry) -> None:
        with self._lock:
            entry.retrieved = entry.retrieved or time.monotonic()

    def _purge(self) -> None:
        now = time.monotonic()
        stale = [
            rid
            for rid, e in self._entries.items()
            if (e.retrieved is not None and now - e.retrieved > _KEEP_RETRIEVED_S)
            or (e.future.done() and now - e.created > _KEEP_UNCLAIMED_S)
        ]
        for rid in stale:
            del self._entries[rid]
        if stale:
            self._by_key = {k: v for k, v in self._by_key.items() if v in self._entries}
