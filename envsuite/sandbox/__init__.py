"""Run untrusted code offline: bubblewrap namespaces plus kernel limits, no Docker, no cloud.

Model-written code runs only here (code envs, graders, Inspect's ``bash()``/``python()``, the
SandboxFusion API of ``envsuite serve-sandbox``). :mod:`envsuite.sandbox._types` holds the contracts;
docs/sandbox.md says what is isolated, how, and what was measured::

    from envsuite.sandbox import Sandbox

    with Sandbox() as box:
        result = box.run_python("print(1)")      # RunResult(stdout='1\\n', exit_code=0, limit=Limit.NONE, ...)
"""

from __future__ import annotations

from envsuite.sandbox._cgroup import CgroupKind
from envsuite.sandbox._session import COOKBOOK_OUTPUT_BYTES, Sandbox, run_python, run_python_async
from envsuite.sandbox._support import SandboxSupport, sandbox_support
from envsuite.sandbox._types import (
    ISOLATION_ENV_VAR,
    SANDBOX_TMPDIR,
    SANDBOX_WORKDIR,
    Isolation,
    Limit,
    Limits,
    RunResult,
    SandboxClosedError,
    SandboxConfig,
    SandboxError,
    SandboxPathError,
    SandboxUnavailableError,
    default_isolation,
)

__all__ = [
    # running code
    "Sandbox",
    "run_python",
    "run_python_async",
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
    # what this machine supports
    "CgroupKind",
    "SandboxSupport",
    "sandbox_support",
    # errors
    "SandboxError",
    "SandboxClosedError",
    "SandboxPathError",
    "SandboxUnavailableError",
]
