"""The ASGI app: the SDK's HTTP API over :class:`ServerState`, behind a key check and a body-size cap
(``envsuite.http_guard``, shared with ``envsuite serve-sandbox``), which also cancels the handling of
a request whose client disconnected.

Tinker routes answer errors in one shape, ``{"error": message, "category": "user" | "server"}``; the
OpenAI routes (and refusals of requests to them) in OpenAI's, ``{"error": {"message", "type", "param",
"code"}}``: 400 for a body that does not parse or validate, 401 for a missing or wrong key, 404 for
unknown ids and routes, 413 for an oversized body, 503 with ``Retry-After`` while the vLLM server
sampling is restarted (``--sampling-engine vllm``), 500 for a bug here (which the SDK retries; its
details stay in the server's log). Nothing a client sends can stop the server; the API key is compared
by digest and never logged or stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
from collections.abc import AsyncIterator, Mapping

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from envsuite.backends.local import UnknownRunError
from envsuite.capture import CAPTURE_NAME_PATTERN, check_id
from envsuite.http_guard import KeyCheck, Refusal, RequestGuard, Scope, key_digest
from envsuite.serve._config import ServeConfig, ServeConfigError
from envsuite.serve._errors import SamplerDown
from envsuite.serve._http import Unsupported, describe_invalid, error
from envsuite.serve._state import NotFound, ServerState
from envsuite.serve.capture._requests import SCOPE_KEY
from envsuite.serve.capture._routes import router as capture_router
from envsuite.serve.openai_api._routes import router as openai_router
from envsuite.serve.openai_api._wire import OpenAIError, is_openai_path
from envsuite.serve.tinker_api._routes import ROUTERS as TINKER_ROUTERS
from envsuite.serve.tinker_api._wire import WireError

logger = logging.getLogger("envsuite.serve")
_REAP_EVERY_S = 30.0
_OPENAI_CODES = {Refusal.NO_KEY: "invalid_api_key", Refusal.TOO_LARGE: "request_too_large"}
"""OpenAI's error codes for the guards' refusals."""


def error_body(scope: Scope, refusal: Refusal, message: str) -> dict[str, object]:
    """A refusal in the shape of the route asked: OpenAI's under the OpenAI prefixes, else Tinker's."""
    if is_openai_path(str(scope.get("path", ""))):
        return OpenAIError(int(refusal), message, code=_OPENAI_CODES[refusal]).body()
    return {"error": message, "category": "user"}


class ServeApp(RequestGuard):
    """The server's ASGI app: :class:`RequestGuard` (body limit, cancelling abandoned requests) around
    the key check around FastAPI."""

    serve_state: ServerState
    """The server's state (for embedding and tests: sessions, models, futures)."""


def _answer(request: Request, status: int, message: str, category: str = "user") -> JSONResponse:
    """An error in the shape of the route asked (OpenAI's or Tinker's)."""
    if is_openai_path(request.url.path):
        return JSONResponse(OpenAIError(status, message).body(), status_code=status)
    return error(status, message, category)


def _install_error_handlers(app: FastAPI) -> None:
    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, pydantic.ValidationError):
            return _answer(request, 400, describe_invalid(exc).message)
        return _answer(request, 400, f"{type(exc).__name__}: {str(exc)[:2000]}")

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _answer(request, 404, str(exc))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        # Unknown routes and wrong methods, in the route family's shape rather than Starlette's.
        assert isinstance(exc, StarletteHTTPException)
        return _answer(request, exc.status_code, str(exc.detail))

    async def os_error(request: Request, exc: Exception) -> JSONResponse:
        # A client-named file or run that does not exist, or a name the OS refuses (too long): the
        # same 404 as any unknown id, saying nothing of the disk. Anything else is a server fault.
        assert isinstance(exc, OSError)
        if isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno == errno.ENAMETOOLONG:
            return _answer(request, 404, "not found on this server")
        return await crashed(request, exc)

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        # The message stays in the log: an unforeseen error's text can name files of the server.
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return _answer(request, 500, f"internal error ({type(exc).__name__}; logged by the server)", "server")

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

    async def sampler_down(request: Request, exc: Exception) -> JSONResponse:
        # vLLM is being restarted: a retryable 503 (the SDK and OpenAI clients honour Retry-After).
        assert isinstance(exc, SamplerDown)
        if is_openai_path(request.url.path):
            body = OpenAIError(503, str(exc), code="sampler_unavailable").body()
        else:
            body = {"error": str(exc), "category": "server"}
        return JSONResponse(body, status_code=503, headers=exc.headers())

    app.add_exception_handler(OpenAIError, openai_error)
    app.add_exception_handler(SamplerDown, sampler_down)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(OSError, os_error)
    app.add_exception_handler(Exception, crashed)


def create_app(
    config: ServeConfig, api_key: str | None = None, capture_keys: Mapping[str, str] | None = None
) -> ServeApp:
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
        capture_digests[key_digest(key)] = name
    state = ServerState(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.vllm is not None:  # --sampling-engine vllm: its server answers before we do
            try:
                await asyncio.to_thread(state.vllm.start)
            except BaseException:
                await asyncio.to_thread(state.close)
                raise
        reaper = asyncio.create_task(_reap(state))
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.to_thread(state.close)

    app = FastAPI(title="envsuite serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    for router in (*TINKER_ROUTERS, openai_router, capture_router):
        app.include_router(router)
    _install_error_handlers(app)
    digest = key_digest(api_key) if api_key else None
    keyed = KeyCheck(app, digest, error_body, capture_digests, SCOPE_KEY)
    outer = ServeApp(keyed, config.max_body_bytes, error_body)
    outer.serve_state = state
    return outer


async def _reap(state: ServerState) -> None:
    while True:
        await asyncio.sleep(_REAP_EVERY_S)
        for session_id in await asyncio.to_thread(state.reap_idle_sessions):
            logger.info("session %s idle past %.0f s: ended", session_id, state.config.session_timeout_s)
