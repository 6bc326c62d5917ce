"""Run untrusted code offline: bubblewrap namespaces plus kernel limits, no Docker, no cloud.

Model-written code runs only here (code envs, graders, Inspect's ``bash()``/``python()``, the
SandboxFusion API of ``envsuite serve-sandbox``). :mod:`envsuite.sandbox._types` holds the contracts;
docs/sandbox.md says what is isolated, how, and what was measured::

    from envsuite.sandbox import Sandbox

    with Sandbox() as box:
        result = box.run_python("print(1)")      # RunResult(stdout='1\\n', exit_code=0, limit=Limit.NONE, ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envsuite.sandbox._cgroup import CgroupKind, live_cgroups
from envsuite.sandbox._process import SandboxProcess
from envsuite.sandbox._session import COOKBOOK_OUTPUT_BYTES, Sandbox, run_python, run_python_async
from envsuite.sandbox._support import SandboxSupport, sandbox_support
from envsuite.sandbox._types import (
    ISOLATION_ENV_VAR,
    SANDBOX_API_KEY_VAR,
    SANDBOX_TMPDIR,
    SANDBOX_WORKDIR,
    Isolation,
    Limit,
    Limits,
    RunResult,
    SandboxCancelledError,
    SandboxClosedError,
    SandboxConfig,
    SandboxError,
    SandboxPathError,
    SandboxServerConfig,
    SandboxUnavailableError,
    default_isolation,
)

if TYPE_CHECKING:
    from envsuite.http_guard import ASGIApp


def create_fusion_app(config: SandboxServerConfig | None = None, api_key: str | None = None) -> ASGIApp:
    """SandboxFusion's ``run_code`` API as an ASGI app (fastapi loads only when this is called).

    ``api_key``: the key every request must carry (``X-API-Key`` or ``Authorization: Bearer``); required
    when ``config.host`` is not loopback (a :class:`~envsuite.errors.UsageError` otherwise)."""
    from envsuite.sandbox._fusion import create_app

    return create_app(config, api_key)


def serve_fusion(config: SandboxServerConfig, api_key: str | None = None) -> None:
    """Serve SandboxFusion's ``run_code`` API with uvicorn until interrupted (``envsuite serve-sandbox``)."""
    from envsuite.sandbox._fusion import serve_fusion as serve

    serve(config, api_key)


__all__ = [
    # running code
    "Sandbox",
    "run_python",
    "run_python_async",
    "SandboxProcess",
    # contracts
    "Limit",
    "Limits",
    "RunResult",
    "SandboxConfig",
    "Isolation",
    "default_isolation",
    "ISOLATION_ENV_VAR",
    "SANDBOX_TMPDIR",
    "SANDBOX_WORKDIR",
    "COOKBOOK_OUTPUT_BYTES",
    # SandboxFusion's HTTP API (envsuite serve-sandbox)
    "SandboxServerConfig",
    "SANDBOX_API_KEY_VAR",
    "create_fusion_app",
    "serve_fusion",
    # what this machine supports
    "CgroupKind",
    "live_cgroups",
    "SandboxSupport",
    "sandbox_support",
    # errors
    "SandboxError",
    "SandboxCancelledError",
    "SandboxClosedError",
    "SandboxPathError",
    "SandboxUnavailableError",
]
