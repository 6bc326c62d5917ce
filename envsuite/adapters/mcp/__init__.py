"""MCP servers' tools as envsuite tools (the official ``mcp`` SDK; ``pip install 'envsuite[mcp]'``).

A stdio server runs inside envsuite's sandbox (no network, its own root, this interpreter's packages
read-only) or, unsandboxed, as the SDK starts it; a streamable HTTP server is reached by URL. Each of
its tools becomes a :class:`~envsuite.tools.Tool` an env lists to the model in its tool format; a call
that fails or times out is the tool's error result. docs/tools.md, "MCP tools"::

    from envsuite.adapters.mcp import McpServer, McpToolbox

    with McpToolbox(McpServer.python_module("mcp_server_time", "--local-timezone", "UTC")) as box:
        tools = box.tools          # [McpTool('get_current_time', ...), McpTool('convert_time', ...)]
"""

from envsuite.adapters.mcp._config import SANDBOX_PYTHON, SERVER_LIMITS, SITE_IN_SANDBOX, McpServer, Transport
from envsuite.adapters.mcp._toolbox import McpStartError, McpTool, McpToolbox, shared_toolbox

__all__ = [
    # configuration
    "McpServer",
    "Transport",
    "SANDBOX_PYTHON",
    "SERVER_LIMITS",
    "SITE_IN_SANDBOX",
    # the tools
    "McpToolbox",
    "McpTool",
    "shared_toolbox",
    "McpStartError",
]
