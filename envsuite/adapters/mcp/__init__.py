"""MCP servers' tools as envsuite tools (the official ``mcp`` SDK, 1.2x or 2.x; ``pip install 'envsuite[mcp]'``).

A stdio server runs inside envsuite's sandbox (no network, its own root, this interpreter's packages
read-only) or, unsandboxed, as the SDK starts it; a streamable HTTP server is reached by URL. Each of
its tools becomes a :class:`~envsuite.tools.Tool` an env lists to the model in its tool format; a call
that fails or times out is the tool's error result. docs/tools.md, "MCP tools"::

    from envsuite.adapters.mcp import McpServer, McpToolbox

    with McpToolbox(McpServer.python_module("mcp_server_time", "--local-timezone", "UTC")) as box:
        tools = box.tools          # [McpTool('get_current_time', ...), McpTool('convert_time', ...)]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from envsuite.adapters.mcp._config import (
    SANDBOX_PYTHON,
    SERVER_LIMITS,
    SERVER_PACKAGES_IN_SANDBOX,
    SERVER_PACKAGES_VAR,
    SITE_IN_SANDBOX,
    McpServer,
    Transport,
    server_module_available,
    server_packages,
)

if TYPE_CHECKING:
    from envsuite.adapters.mcp._toolbox import McpStartError, McpTool, McpToolbox, shared_toolbox

_TOOLBOX = ("McpStartError", "McpTool", "McpToolbox", "shared_toolbox")
"""Loaded on first use: they import the mcp SDK (1.2x or >=2.3), which an install may lack (docs/tools.md)."""

__all__ = [
    # configuration
    "McpServer",
    "Transport",
    "SANDBOX_PYTHON",
    "SERVER_LIMITS",
    "SITE_IN_SANDBOX",
    # where servers' own packages live (their SDK may be newer than the client's)
    "SERVER_PACKAGES_IN_SANDBOX",
    "SERVER_PACKAGES_VAR",
    "server_packages",
    "server_module_available",
    # the tools
    "McpToolbox",
    "McpTool",
    "shared_toolbox",
    "McpStartError",
]


def __getattr__(name: str) -> Any:
    if name in _TOOLBOX:
        return getattr(importlib.import_module("envsuite.adapters.mcp._toolbox"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
