"""SandboxFusion's ``run_code`` HTTP API, served from :class:`~envsuite.sandbox.Sandbox` on loopback.

Clients written for SandboxFusion's Docker server (tinker-cookbook's ``SandboxFusionClient`` and its
``code_rl`` grading via ``SANDBOX_URL``, verl's and SkyRL's sandbox tools) work unchanged. The request
and response shapes are SandboxFusion's (``RunCodeRequest`` / ``RunCodeResponse``, statuses
``Success`` / ``Failed`` / ``SandboxError``, per-command ``Finished`` / ``TimeLimitExceeded`` /
``Error``); each request runs in a fresh sandbox whose ``/work`` is the working directory, like
SandboxFusion's per-request temp dir. Languages: ``python`` (also ``python3``) and ``bash``; others are
answered ``SandboxError`` saying so. Responses add one field SandboxFusion does not have,
``sandbox``: the :class:`~envsuite.sandbox.Limit` that ended the run, CPU time, whether it was
isolated, and the limits it had (clients ignore unknown fields).

The server, not the client, has the last word on resources: a request's ``run_timeout`` and
``memory_limit_MB`` are capped by the server's own limits, a run whose client disconnects is killed
(``envsuite.http_guard`` cancels the request, which sets the run's cancel event), and the server
refuses to listen beyond loopback without a key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import threading
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request  # the route's annotation, resolved by FastAPI at import

from envsuite.errors import UsageError
from envsuite.http_guard import ASGIApp, KeyCheck, Refusal, RequestGuard, Scope, check_exposure, key_digest
from envsuite.sandbox._session import Sandbox
from envsuite.sandbox._types import (
    SANDBOX_API_KEY_VAR,
    Isolation,
    Limit,
    Limits,
    RunResult,
    SandboxConfig,
    SandboxError,
    SandboxServerConfig,
)

_LANGUAGES = {"python": "python", "python3": "python", "bash": "bash"}


MAX_FETCH_FILES = 256
"""Paths one request may ask back (more is a 422): each read through a link is a sandboxed run."""
FETCH_BYTES = 64 << 20
"""Bytes of files one answer carries at most, like the request body limit (the rest are left out)."""


class RunStatus(enum.StrEnum):
    SUCCESS = "Success"
    FAILED = "Failed"
    SANDBOX_ERROR = "SandboxError"


class CommandRunStatus(enum.StrEnum):
    FINISHED = "Finished"
    ERROR = "Error"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"


class RunCodeRequest(BaseModel):
    """SandboxFusion's request body of ``POST /run_code``. Timeouts and memory are capped by the
    server's own limits (``envsuite serve-sandbox --run-timeout/--memory-mb``)."""

    model_config = ConfigDict(allow_inf_nan=False)
    code: str
    language: str = "python"
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    """Path (relative to the working dir, or absolute inside the sandbox) -> base64 content."""
    fetch_files: list[str] = Field(default_factory=list, max_length=MAX_FETCH_FILES)


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class SandboxDetails(BaseModel):
    """envsuite's addition: how the run ended, in the sandbox's own terms."""

    limit: str
    cpu_time: float
    """CPU seconds of the sandboxed process tree (user + system)."""
    isolated: bool
    truncated: bool
    run_timeout: float | None = None
    """The wall-clock limit the run had (the request's, capped by the server's)."""
    memory_MB: int | None = None
    """The memory limit the run had (likewise)."""


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    sandbox: SandboxDetails | None = None


def _limits(request: RunCodeRequest, base: Limits) -> Limits:
    """The request's timeout and memory, capped by the server's own limits (``base``): a client may
    ask for less, never for more."""
    if not request.run_timeout > 0:
        raise ValueError(f"run_timeout must be > 0, got {request.run_timeout}")
    seconds = min(float(request.run_timeout), base.wall_s)
    limits = replace(base, wall_s=seconds, cpu_s=min(seconds, base.cpu_s))
    if request.memory_limit_MB > 0:
        limits = replace(limits, memory_mb=min(int(request.memory_limit_MB), base.memory_mb))
    return limits


def _command_result(done: RunResult) -> CommandRunResult:
    timed_out = done.limit in (Limit.WALL_TIME, Limit.CPU_TIME)
    return CommandRunResult(
        status=CommandRunStatus.TIME_LIMIT_EXCEEDED if timed_out else CommandRunStatus.FINISHED,
        execution_time=done.wall_s,
        return_code=done.exit_code,
        stdout=done.stdout,
        stderr=done.stderr,
    )


def run_code(
    request: RunCodeRequest, config: SandboxConfig, cancel: threading.Event | None = None
) -> RunCodeResponse:
    """Answer one ``run_code`` request (blocking): files in, program run, files out. Setting ``cancel``
    (the client left) kills the run; the answer then says so (nobody reads it)."""
    language = _LANGUAGES.get(request.language)
    if language is None:
        supported = ", ".join(sorted(_LANGUAGES))
        return RunCodeResponse(
            status=RunStatus.SANDBOX_ERROR,
            message=f"language {request.language!r} is not supported by envsuite's sandbox ({supported})",
        )
    try:
        limits = _limits(request, config.limits)
        with Sandbox(config) as box:
            for path, content in request.files.items():
                box.write_bytes(path, base64.b64decode(content or "", validate=True))
            if language == "python":
                done = box.run_python(request.code, stdin=request.stdin, limits=limits, cancel=cancel)
            else:
                argv = ["bash", "-c", request.code]
                done = box.run(argv, stdin=request.stdin, limits=limits, cancel=cancel)
            fetched = _fetch(box, request.fetch_files, cancel)
    except (SandboxError, OSError, ValueError, binascii.Error) as exc:
        return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=f"{type(exc).__name__}: {exc}")
    result = _command_result(done)
    ok = done.ok
    return RunCodeResponse(
        status=RunStatus.SUCCESS if ok else RunStatus.FAILED,
        run_result=result,
        files=fetched,
        sandbox=SandboxDetails(
            limit=done.limit.value,
            cpu_time=done.cpu_s,
            isolated=done.isolated,
            truncated=done.truncated,
            run_timeout=limits.wall_s,
            memory_MB=limits.memory_mb,
        ),
    )


def _fetch(box: Sandbox, paths: list[str], cancel: threading.Event | None) -> dict[str, str]:
    """Files to send back (base64); missing or refused ones are left out, as SandboxFusion does, and
    so are those past :data:`FETCH_BYTES` in all (one path named many times is read once)."""
    fetched: dict[str, str] = {}
    room = FETCH_BYTES
    for path in dict.fromkeys(paths):
        if cancel is not None and cancel.is_set():
            break  # the client left: reading more (each read of a link is a sandboxed run) is waste
        try:
            data = box.read_bytes(path, max_bytes=room + 1)
        except (OSError, SandboxError):
            continue
        if len(data) <= room:
            room -= len(data)
            fetched[path] = base64.b64encode(data).decode("ascii")
    return fetched


def _error_body(scope: Scope, refusal: Refusal, message: str) -> dict[str, object]:
    return {"detail": message}  # FastAPI's shape, which SandboxFusion's own server answers in


def create_app(config: SandboxServerConfig | None = None, api_key: str | None = None) -> ASGIApp:
    """The app: ``POST /run_code``, ``GET /v1/ping`` and ``GET /`` (health), behind the body limit, the
    key check (``api_key``; required off loopback) and the cancelling of runs whose client left."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse

    settings = config or SandboxServerConfig()
    check_exposure(
        settings.host,
        api_key,
        what="code execution",
        key_hint=f"--api-key or {SANDBOX_API_KEY_VAR}",
        error=UsageError,
    )
    Sandbox(settings.sandbox).close()  # refuse to start where isolation cannot work (clear error)
    app = FastAPI(title="envsuite sandbox (SandboxFusion run_code API)")

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code_route(request: Request) -> JSONResponse:
        raw = await request.body()
        try:  # a 64 MB body takes a while to parse: off the event loop, as the run itself
            body = await asyncio.to_thread(RunCodeRequest.model_validate_json, raw)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_input=False, include_url=False)) from exc
        cancel = threading.Event()
        try:
            answer = await asyncio.to_thread(run_code, body, settings.sandbox, cancel)
        except asyncio.CancelledError:
            cancel.set()  # the client left (the request guard cancelled us): kill the run now
            raise
        return JSONResponse(answer.model_dump(mode="json"))

    @app.get("/v1/ping", response_class=PlainTextResponse)
    async def ping() -> str:
        return "pong"

    @app.get("/")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "isolated": settings.sandbox.isolation is Isolation.BWRAP}

    keyed = KeyCheck(app, key_digest(api_key) if api_key else None, _error_body)
    return RequestGuard(keyed, settings.max_body_bytes, _error_body)


def serve_fusion(config: SandboxServerConfig, api_key: str | None = None) -> None:
    """Run the server with uvicorn until interrupted."""
    import uvicorn

    app = create_app(config, api_key)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
