"""The ASGI app: the SDK's HTTP API over :class:`ServerState`, behind a key check and a body-size cap.

Errors come back in one shape, ``{"error": message, "category": "user" | "server"}``: 400 for a body
that does not parse or validate, 401 for a missing or wrong key, 404 for unknown ids, 413 for an
oversized body, 500 for a bug here (which the SDK retries). Nothing a client sends can stop the
server; the API key is compared by digest and never logged or stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envsuite.backends.local import UnknownRunError
from envsuite.capture import CAPTURE_NAME_PATTERN, check_id
from envsuite.serve._capture_http import SCOPE_KEY
from envsuite.serve._config import ServeConfig, ServeConfigError
from envsuite.serve._http import Unsupported, error
from envsuite.serve._oai_wire import OpenAIError
from envsuite.serve._routes_capture import router as capture_router
from envsuite.serve._routes_openai import router as openai_router
from envsuite.serve._routes_rest import router as rest_router
from envsuite.serve._routes_sampling import router as sampling_router
from envsuite.serve._routes_service import router as service_router
from envsuite.serve._routes_training import router as training_router
from envsuite.serve._state import NotFound, ServerState
from envsuite.serve._wire import WireError

logger = logging.getLogger("envsuite.serve")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_REAP_EVERY_S = 30.0


class _BodyLimit:
    """Refuses bodies over ``limit`` bytes (413), by their Content-Length or as they stream in.

    The body is read here, before the app sees the request, and replayed to it: an oversized upload is
    answered without touching the app, whatever its headers claim.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self.serve_state: ServerState | None = None
        """The server's state (for embedding and tests: sessions, models, futures)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = {"error": f"request body over {self.limit} bytes", "category": "user"}
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _send_json(send, 413, too_large)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await _send_json(send, 413, too_large)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def sent_key(headers: dict[bytes, bytes]) -> bytes:
    """The key a request carries: ``X-API-Key`` (the tinker SDK) or ``Authorization: Bearer`` (OpenAI's)."""
    if b"x-api-key" in headers:
        return headers[b"x-api-key"]
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


class _KeyCheck:
    """Refuses every request without the server's key (401; a no-op when no key is set) or one of its
    capture keys, whose requests it marks for capture into that key's set."""

    def __init__(self, app: ASGIApp, key_digest: bytes | None, capture_digests: dict[bytes, str]) -> None:
        self.app, self.digest, self.capture_digests = app, key_digest, capture_digests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.digest is None and not self.capture_digests):
            await self.app(scope, receive, send)
            return
        sent = hashlib.sha256(sent_key(dict(scope.get("headers") or []))).digest()
        capture = next((n for d, n in self.capture_digests.items() if hmac.compare_digest(sent, d)), None)
        if capture is not None:
            scope[SCOPE_KEY] = capture
        elif self.digest is not None and not hmac.compare_digest(sent, self.digest):
            message = "missing or wrong API key (X-API-Key, or Authorization: Bearer)"
            await _send_json(send, 401, {"error": message, "category": "user"})
            return
        await self.app(scope, receive, send)


async def _send_json(send: Send, status: int, body: Mapping[str, object]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _install_error_handlers(app: FastAPI) -> None:
    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return error(400, f"{type(exc).__name__}: {str(exc)[:2000]}")

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return error(404, str(exc))

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error(500, f"internal error: {type(exc).__name__}: {exc}", "server")

    for kind in (
        pydantic.ValidationError,
        json.JSONDecodeError,
        WireError,
        Unsupported,
        NotImplementedError,
        ValueError,
    ):
        app.add_exception_handler(kind, bad_request)
    for missing in (NotFound, UnknownRunError):
        app.add_exception_handler(missing, not_found)

    async def openai_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, OpenAIError)
        return JSONResponse(exc.body(), status_code=exc.status)

    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(Exception, crashed)


def create_app(
    config: ServeConfig, api_key: str | None = None, capture_keys: Mapping[str, str] | None = None
) -> _BodyLimit:
    """The server as an ASGI app (run it with uvicorn; :func:`envsuite.serve.serve` does).

    ``api_key``: the key every request must carry in ``X-API-Key`` or ``Authorization: Bearer``
    (required by :meth:`ServeConfig.check` for a non-loopback ``host``). ``capture_keys``: capture set
    name -> a further key; every request carrying one is accepted and captured into that set (hand it
    to an agent that cannot set headers). Only the keys' SHA-256 digests are kept.
    """
    config.check(api_key)
    capture_digests = {}
    for name, key in (capture_keys or {}).items():
        check_id(name, "capture set name", CAPTURE_NAME_PATTERN)
        if not key or key == api_key:
            raise ServeConfigError(
                f"capture set {name!r} needs a key of its own (not empty, not the API key)"
            )
        capture_digests[hashlib.sha256(key.encode()).digest()] = name
    state = ServerState(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(_reap(state))
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.to_thread(state.close)

    app = FastAPI(title="envsuite serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    for router in (
        service_router,
        training_router,
        sampling_router,
        rest_router,
        openai_router,
        capture_router,
    ):
        app.include_router(router)
    _install_error_handlers(app)
    digest = hashlib.sha256(api_key.encode()).digest() if api_key else None
    outer = _BodyLimit(_KeyCheck(app, digest, capture_digests), config.max_body_bytes)
    outer.serve_state = state
    return outer


async def _reap(state: ServerState) -> None:
    while True:
        await asyncio.sleep(_REAP_EVERY_S)
        for session_id in await asyncio.to_thread(state.reap_idle_sessions):
            logger.info("session %s idle past %.0f s: ended", session_id, state.config.session_timeout_s)
