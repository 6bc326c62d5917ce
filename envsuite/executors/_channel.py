"""Workers call back into the driver: a small RPC channel over one socket per worker process.

Env work runs in workers, but sampling must reach the one SamplingClient in the driver (a local model,
``envsuite serve``, or hosted Tinker). The driver runs a :class:`CallbackServer` (a listener thread,
one reader thread per worker connection); :meth:`CallbackServer.expose` registers an async function of
the driver and returns a :class:`Callback`, a picklable handle that a worker awaits like the function
itself. Each call is scheduled on the driver's event loop, so many workers' sampling requests reach
the sampler together and it batches them as it would in process.

The wire is ``multiprocessing.connection`` (pickle framing) with a random per-server authkey: only
processes handed a :class:`Callback` can connect. A worker whose driver went away gets
:class:`ChannelClosedError` from every pending and later call instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener

AsyncFn = Callable[..., Awaitable[object]]
"""A driver-side function workers may call; what it returns travels back pickled (callers check it)."""


class ChannelClosedError(ConnectionError):
    """The driver's callback server is gone (the run ended or the driver died)."""


class RemoteCallError(RuntimeError):
    """The driver-side function raised; the message carries its repr."""


@dataclass(frozen=True)
class Callback:
    """A picklable handle to one driver-side async function; ``await callback(*args)`` in a worker."""

    address: tuple[str, int]
    authkey: bytes
    endpoint: int

    async def __call__(self, *args: object) -> object:
        future = _client_for(self.address, self.authkey).call(self.endpoint, args)
        return await asyncio.wrap_future(future)


class CallbackServer:
    """The driver's end: exposes async functions to workers; call :meth:`close` when the run ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop, host: str = "127.0.0.1") -> None:
        self._loop = loop
        self._authkey = secrets.token_bytes(32)
        self._listener = Listener((host, 0), authkey=self._authkey)
        self.address: tuple[str, int] = self._listener.address
        self._endpoints: dict[int, AsyncFn] = {}
        self._ids = itertools.count()
        self._connections: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="envsuite-callback-accept", daemon=True).start()

    def expose(self, fn: AsyncFn) -> Callback:
        endpoint = next(self._ids)
        with self._lock:
            self._endpoints[endpoint] = fn
        return Callback(self.address, self._authkey, endpoint)

    def release(self, callback: Callback) -> None:
        """Forget an endpoint (later calls to it fail); idempotent."""
        with self._lock:
            self._endpoints.pop(callback.endpoint, None)

    def close(self) -> None:
        """Stop accepting and drop every connection: workers' pending calls fail at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        # Closing a socket does not wake a thread blocked on it: connect once to release the accept
        # loop, and shut the connections down so workers (and our readers) see EOF at once.
        with contextlib.suppress(OSError, EOFError, ValueError):
            Client(self.address, authkey=self._authkey).close()
        with contextlib.suppress(OSError):
            self._listener.close()
        for conn in connections:
            _shutdown(conn)

    # -- threads -------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):
                if self._closed:
                    return
                continue  # a client that failed the auth handshake
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), name="envsuite-callback", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        send_lock = threading.Lock()
        while True:
            try:
                request_id, endpoint, args = conn.recv()
            except (OSError, EOFError):
                return
            with self._lock:
                fn = self._endpoints.get(endpoint)
            if fn is None:
                _reply(
                    conn, send_lock, request_id, False, f"no endpoint {endpoint} (released or never exposed)"
                )
                continue
            try:
                future = asyncio.run_coroutine_threadsafe(_call(fn, args), self._loop)
            except RuntimeError as exc:  # the driver's loop is closed
                _reply(conn, send_lock, request_id, False, repr(exc))
                continue
            future.add_done_callback(functools.partial(_reply_from, conn, send_lock, request_id))


def _shutdown(conn: Connection) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
    with contextlib.suppress(OSError):
        conn.close()


async def _call(fn: AsyncFn, args: tuple[object, ...]) -> object:
    return await fn(*args)


def _reply_from(conn: Connection, lock: threading.Lock, request_id: int, done: Future[object]) -> None:
    if done.cancelled():
        _reply(conn, lock, request_id, False, "cancelled in the driver")
    elif done.exception() is not None:
        _reply(conn, lock, request_id, False, repr(done.exception())[:2000])
    else:
        _reply(conn, lock, request_id, True, done.result())


def _reply(conn: Connection, lock: threading.Lock, request_id: int, ok: bool, value: object) -> None:
    with lock, contextlib.suppress(OSError, ValueError):
        try:
            conn.send((request_id, ok, value))
        except (OSError, ValueError):
            raise
        except Exception as exc:  # the result did not pickle: the caller must still get an answer
            conn.send((request_id, False, f"the driver's result could not be sent: {exc!r}"))


# ------------------------------------------------------------------------------------------------
# The worker's end: one connection per (process, server), shared by every call in the process.
# ------------------------------------------------------------------------------------------------


class _ChannelClient:
    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        self._conn = Client(address, authkey=authkey)
        self._pending: dict[int, Future[object]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._read, name="envsuite-callback-client", daemon=True).start()

    def call(self, endpoint: int, args: tuple[object, ...]) -> Future[object]:
        future: Future[object] = Future()
        with self._lock:
            if self.closed:
                future.set_exception(ChannelClosedError("the driver's callback server is closed"))
                return future
            request_id = next(self._ids)
            self._pending[request_id] = future
            try:
                self._conn.send((request_id, endpoint, args))
            except (OSError, ValueError) as exc:
                self._pending.pop(request_id, None)
                future.set_exception(ChannelClosedError(f"lost the driver: {exc!r}"))
            except Exception as exc:  # the arguments did not pickle; nothing was sent
                self._pending.pop(request_id, None)
                future.set_exception(exc)
        return future

    def _read(self) -> None:
        while True:
            try:
                request_id, ok, value = self._conn.recv()
            except (OSError, EOFError):
                self._fail_all()
                return
            with self._lock:
                future = self._pending.pop(request_id, None)
            if future is None:
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(RemoteCallError(str(value)))

    def _fail_all(self) -> None:
        with self._lock:
            self.closed = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(ChannelClosedError("the driver's callback server closed the connection"))


_clients: dict[tuple[tuple[str, int], bytes], _ChannelClient] = {}
_clients_lock = threading.Lock()


def _client_for(address: tuple[str, int], authkey: bytes) -> _ChannelClient:
    key = (tuple(address), authkey)
    with _clients_lock:
        client = _clients.get(key)  # type: ignore[arg-type]
        if client is None or client.closed:
            try:
                client = _ChannelClient(address, authkey)
            except (OSError, EOFError) as exc:
                raise ChannelClosedError(f"cannot reach the driver at {address}: {exc!r}") from exc
            _clients[key] = client  # type: ignore[index]
        return client
