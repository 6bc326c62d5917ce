"""SandboxFusion's ``run_code`` HTTP API, served from :class:`~envsuite.sandbox.Sandbox` on loopback.

Clients written for SandboxFusion's Docker server (tinker-cookbook's ``SandboxFusionClient`` and its
``code_rl`` grading via ``SANDBOX_URL``, verl's and SkyRL's sandbox tools) work unchanged. The request
and response shapes are SandboxFusion's (``RunCodeRequest`` / ``RunCodeResponse``, statuses
``Success`` / ``Failed`` / ``SandboxError``, per-command ``Finished`` / ``TimeLimitExceeded`` /
``Error``); each request runs in a fresh sandbox whose ``/work`` is the working directory, like
SandboxFusion's per-request temp dir. Languages: ``python`` (also ``python3``) and ``bash``; others are
answered ``SandboxError`` saying so. Responses add one field SandboxFusion does not have,
``sandbox``: the :class:`~envsuite.sandbox.Limit` that ended the run, CPU time, and whether it was
isolated (clients ignore unknown fields).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from envsuite.sandbox._session import Sandbox
from envsuite.sandbox._types import (
    Isolation,
    Limit,
    Limits,
    RunResult,
    SandboxConfig,
    SandboxError,
    SandboxServerConfig,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from fastapi import FastAPI, Response

_LANGUAGES = {"python": "python", "python3": "python", "bash": "bash"}


class RunStatus(enum.StrEnum):
    SUCCESS = "Success"
    FAILED = "Failed"
    SANDBOX_ERROR = "SandboxError"


class CommandRunStatus(enum.StrEnum):
    FINISHED = "Finished"
    ERROR = "Error"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"


class RunCodeRequest(BaseModel):
    """SandboxFusion's request body of ``POST /run_code``."""

    code: str
    language: str = "python"
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    """Path (relative to the working dir, or absolute inside the sandbox) -> base64 content."""
    fetch_files: list[str] = Field(default_factory=list)


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
    isolated: bool
    truncated: bool


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    sandbox: SandboxDetails | None = None


def _limits(request: RunCodeRequest, base: Limits) -> Limits:
    if not request.run_timeout > 0:
        raise ValueError(f"run_timeout must be > 0, got {request.run_timeout}")
    limits = base.with_time(request.run_timeout)
    if request.memory_limit_MB > 0:
        limits = replace(limits, memory_mb=int(request.memory_limit_MB))
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


def run_code(request: RunCodeRequest, config: SandboxConfig) -> RunCodeResponse:
    """Answer one ``run_code`` request (blocking): files in, program run, files out."""
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
                done = box.run_python(request.code, stdin=request.stdin, limits=limits)
            else:
                done = box.run(["bash", "-c", request.code], stdin=request.stdin, limits=limits)
            fetched = _fetch(box, request.fetch_files)
    except (SandboxError, OSError, ValueError, binascii.Error) as exc:
        return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=f"{type(exc).__name__}: {exc}")
    result = _command_result(done)
    ok = done.ok
    return RunCodeResponse(
        status=RunStatus.SUCCESS if ok else RunStatus.FAILED,
        run_result=result,
        files=fetched,
        sandbox=SandboxDetails(
            limit=done.limit.value, cpu_time=done.cpu_s, isolated=done.isolated, truncated=done.truncated
        ),
    )


def _fetch(box: Sandbox, paths: list[str]) -> dict[str, str]:
    """Files to send back (base64); missing or refused ones are left out, as SandboxFusion does."""
    fetched: dict[str, str] = {}
    for path in paths:
        try:
            fetched[path] = base64.b64encode(box.read_bytes(path)).decode("ascii")
        except (OSError, SandboxError):
            continue
    return fetched


def create_app(config: SandboxServerConfig | None = None) -> FastAPI:
    """The FastAPI app: ``POST /run_code``, ``GET /v1/ping`` and ``GET /`` (health)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse

    settings = config or SandboxServerConfig()
    Sandbox(settings.sandbox).close()  # refuse to start where isolation cannot work (clear error)
    app = FastAPI(title="envsuite sandbox (SandboxFusion run_code API)")

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > settings.max_body_bytes:
            return JSONResponse(
                {"detail": f"request body over {settings.max_body_bytes} bytes"}, status_code=413
            )
        return await call_next(request)

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code_route(request: RunCodeRequest) -> RunCodeResponse:
        return await asyncio.to_thread(run_code, request, settings.sandbox)

    @app.get("/v1/ping", response_class=PlainTextResponse)
    async def ping() -> str:
        return "pong"

    @app.get("/")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "isolated": settings.sandbox.isolation is Isolation.BWRAP}

    return app


def serve_fusion(config: SandboxServerConfig) -> None:
    """Run the server with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="warning", access_log=False)
