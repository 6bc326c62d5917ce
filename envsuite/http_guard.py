"""What envsuite's HTTP servers share to be safe to expose: the bind rule, the key check, the body
limit and cancelling a request whose client left.

``envsuite serve`` and ``envsuite serve-sandbox`` both use these (light: no fastapi, no torch), so both
refuse the same way to listen beyond loopback without a key, read keys from the same headers, and stop
work nobody waits for any more:

* :func:`check_exposure`: a bind address other than loopback needs a key;
* :class:`KeyCheck`: every request must carry the key (``X-API-Key`` or ``Authorization: Bearer``),
  compared by digest;
* :class:`RequestGuard`: bodies over a limit are refused before the app sees them (413); the body is
  read first and replayed, and when the client disconnects before its response is complete the app's
  handling of that request is cancelled (a long generation or a sandboxed run stops with it).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from envsuite.errors import UsageError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Refusal(enum.IntEnum):
    """Why a guard answered a request itself (the HTTP status it answers with)."""

    NO_KEY = 401
    TOO_LARGE = 413


ErrorBody = Callable[[Scope, Refusal, str], Mapping[str, object]]
"""The JSON body a server answers a refusal with, given the request's scope (servers with several
error shapes pick one by path)."""


def is_loopback(host: str) -> bool:
    """True when only this machine can connect to ``host``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(
    host: str, api_key: str | None, *, what: str, key_hint: str, error: type[UsageError]
) -> None:
    """Refuse (``error``) to bind ``host`` beyond loopback without a key: ``what`` would be open to the
    network. ``key_hint`` says how to give one (the flag and the environment variable)."""
    if not is_loopback(host) and not api_key:
        raise error(
            f"binding {host} exposes {what} to the network: set an API key ({key_hint}); every "
            "request without it is then refused"
        )


def sent_key(headers: Mapping[bytes, bytes]) -> bytes:
    """The key a request carries: ``X-API-Key`` (the tinker SDK) or ``Authorization: Bearer`` (OpenAI's)."""
    if b"x-api-key" in headers:
        return headers[b"x-api-key"]
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


def key_digest(key: str) -> bytes:
    """What a server keeps of a key (never the key itself)."""
    return hashlib.sha256(key.encode()).digest()


async def send_json(send: Send, status: int, body: Mapping[str, object]) -> None:
    """A whole JSON response, straight to the ASGI server."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class KeyCheck:
    """Refuses every request without the server's key (401). ``other_keys``: digests of further keys
    that are accepted too, each naming what it stands for; the name is put in the request's scope
    under ``scope_key`` (``envsuite serve``'s capture keys)."""

    def __init__(
        self,
        app: ASGIApp,
        digest: bytes | None,
        error_body: ErrorBody,
        other_keys: Mapping[bytes, str] | None = None,
        scope_key: str = "",
    ) -> None:
        self.app, self.digest, self.error_body = app, digest, error_body
        self.other_keys, self.scope_key = dict(other_keys or {}), scope_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.digest is None and not self.other_keys):
            await self.app(scope, receive, send)
            return
        sent = hashlib.sha256(sent_key(dict(scope.get("headers") or []))).digest()
        other = next((n for d, n in self.other_keys.items() if hmac.compare_digest(sent, d)), None)
        if other is not None:
            scope[self.scope_key] = other
        elif self.digest is not None and not hmac.compare_digest(sent, self.digest):
            message = "missing or wrong API key (X-API-Key, or Authorization: Bearer)"
            await send_json(send, Refusal.NO_KEY, self.error_body(scope, Refusal.NO_KEY, message))
            return
        await self.app(scope, receive, send)


class RequestGuard:
    """Refuses bodies over ``limit`` bytes (413), by their Content-Length or as they stream in, and
    cancels the app's handling of a request whose client disconnects before its response is complete.

    The body is read here, before the app sees the request, and replayed to it: an oversized upload is
    answered without touching the app, whatever its headers claim. After the body, the client's
    connection is watched: a disconnect cancels the task running the app for that request, so whatever
    it awaits (a sampling future, a sandboxed run) is cancelled with it, streaming or not.
    """

    def __init__(self, app: ASGIApp, limit: int, error_body: ErrorBody) -> None:
        self.app, self.limit, self.error_body = app, limit, error_body
        self.cancelled = 0
        """Requests cancelled so far because their client left (for logs and tests)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        await self._run(scope, body, receive, send)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body; None when it was refused or the client left while sending it."""
        message = f"request body over {self.limit} bytes"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await send_json(send, Refusal.TOO_LARGE, self.error_body(scope, Refusal.TOO_LARGE, message))
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            received = await receive()
            if received["type"] != "http.request":  # the client went away
                return None
            chunks.append(received.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await send_json(send, Refusal.TOO_LARGE, self.error_body(scope, Refusal.TOO_LARGE, message))
                return None
            if not received.get("more_body", False):
                return b"".join(chunks)

    async def _run(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()
        finished = False
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()  # the app listens for a disconnect (a streaming response does)
            return {"type": "http.disconnect"}

        async def tracked(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True  # before sending: the server reports the end as a disconnect
            await send(message)

        handling: asyncio.Future[None] = asyncio.ensure_future(self.app(scope, replay, tracked))

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not finished and not handling.done():
                self.cancelled += 1
                handling.cancel()

        watcher = asyncio.create_task(watch())
        try:
            await handling
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not gone.is_set() or (current is not None and current.cancelling()):
                raise  # the server itself is stopping this request
        finally:
            watcher.cancel()
