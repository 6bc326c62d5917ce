"""Which MCP server to use and how to reach it: a stdio command (in envsuite's sandbox by default) or a URL.

Invariants: exactly one of ``command`` and ``url`` is set; a sandboxed stdio server sees its scratch
root, the system's ``/usr`` and, read-only, this interpreter's site-packages at :data:`SITE_IN_SANDBOX`
(``PYTHONPATH``), so a server shipped as a Python package (``mcp-server-time``, ``mcp-server-git``)
runs with the system's Python (the same minor version as this one) and no network. Where the folder
:func:`server_packages` names exists, it comes first on that path (at :data:`SERVER_PACKAGES_IN_SANDBOX`),
also for an unsandboxed Python server: servers built on mcp 2 run from there while this interpreter's
client stays on mcp 1 (the dev install's; ``make install`` fills the folder, docs/tools.md).
"""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from envsuite.sandbox import Limits

SITE_IN_SANDBOX = "/opt/envsuite/site-packages"
"""Where a sandboxed server sees this interpreter's site-packages (read-only)."""
SERVER_PACKAGES_IN_SANDBOX = "/opt/envsuite/mcp-servers"
"""Where a sandboxed server sees the server packages' folder (read-only), first on its path."""
SERVER_PACKAGES_VAR = "ENVSUITE_MCP_SERVERS"
"""Names the server packages' folder; by default ``mcp-servers`` in this interpreter's prefix (the venv)."""
SANDBOX_PYTHON = "/usr/bin/python3"
"""The interpreter a sandboxed Python server runs with (the host's venv interpreter may live where the
sandbox's unprivileged uid cannot read; the system's shares the venv's minor version here)."""
SERVER_LIMITS = Limits(wall_s=3600.0, cpu_s=600.0, memory_mb=2048, processes=32)
"""A server lives for a toolbox's lifetime: CPU seconds over all its calls, and room for pydantic."""


class Transport(enum.StrEnum):
    """How the client talks to the server."""

    STDIO = "stdio"
    STREAMABLE_HTTP = "streamable_http"


@dataclass(frozen=True)
class McpServer:
    """One MCP server's configuration (build with :meth:`stdio`, :meth:`python_module` or :meth:`http`)."""

    command: tuple[str, ...] = ()
    """The stdio server's argv (run in the sandbox unless ``sandboxed`` is False)."""
    url: str | None = None
    """The streamable HTTP endpoint (``http://127.0.0.1:8000/mcp``)."""
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    sandboxed: bool = True
    """Stdio servers only: run inside :class:`envsuite.sandbox.Sandbox` (no network, own root)."""
    limits: Limits = SERVER_LIMITS
    call_timeout_s: float = 30.0
    """A call that takes longer is the tool's error result (the server keeps running)."""
    start_timeout_s: float = 60.0
    """Connect, initialize and list the tools within this, or :meth:`McpToolbox.start` raises."""
    name_prefix: str = ""
    """Prepended to each tool's name (two servers with a ``search`` tool in one env)."""

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("an McpServer has either a stdio command or a url, not both or neither")
        if self.call_timeout_s <= 0 or self.start_timeout_s <= 0:
            raise ValueError("timeouts must be positive")

    @property
    def transport(self) -> Transport:
        return Transport.STDIO if self.command else Transport.STREAMABLE_HTTP

    @classmethod
    def stdio(
        cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **options: object
    ) -> McpServer:
        return cls(command=tuple(argv), env=dict(env or {}), **options)  # type: ignore[arg-type]

    @classmethod
    def python_module(cls, module: str, *args: str, **options: object) -> McpServer:
        """A server run as ``python -m module args...`` (the sandbox's Python, or this one unsandboxed)."""
        sandboxed = bool(options.get("sandboxed", True))
        python = SANDBOX_PYTHON if sandboxed else sys.executable
        return cls(command=(python, "-m", module, *args), **options)  # type: ignore[arg-type]

    @classmethod
    def http(cls, url: str, **options: object) -> McpServer:
        return cls(url=url, **options)  # type: ignore[arg-type]


def site_packages() -> str:
    """This interpreter's site-packages (bound read-only into a sandboxed server)."""
    return sysconfig.get_paths()["purelib"]


def server_packages() -> str | None:
    """The folder of MCP server packages with their own SDK (``pip install --target``), if it exists."""
    folder = os.environ.get(SERVER_PACKAGES_VAR) or os.path.join(sys.prefix, "mcp-servers")
    return folder if os.path.isdir(folder) else None


def sandbox_pythonpath() -> str:
    """A sandboxed server's ``PYTHONPATH``: the server packages (where present), then site-packages."""
    paths = [SITE_IN_SANDBOX]
    if server_packages() is not None:
        paths.insert(0, SERVER_PACKAGES_IN_SANDBOX)
    return os.pathsep.join(paths)


def sandbox_binds() -> dict[str, str]:
    """The read-only binds a sandboxed server gets: host folder -> where the sandbox sees it."""
    binds = {site_packages(): SITE_IN_SANDBOX}
    folder = server_packages()
    if folder is not None:
        binds[folder] = SERVER_PACKAGES_IN_SANDBOX
    return binds


def server_env(server: McpServer) -> dict[str, str]:
    """An unsandboxed stdio server's environment additions: the server packages first on its path."""
    env = dict(server.env)
    folder = server_packages()
    if folder is not None and "PYTHONPATH" not in env:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
    return env


def server_module_available(module: str) -> bool:
    """Whether a Python MCP server module is installed where a server would run it from."""
    folder = server_packages()
    if folder is not None and os.path.isdir(os.path.join(folder, module)):
        return True
    return importlib.util.find_spec(module) is not None
