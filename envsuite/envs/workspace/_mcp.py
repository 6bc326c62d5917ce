"""MCP servers in a workspace episode: their tools beside the workspace's, run in the episode's own sandbox.

A workspace env given ``mcp_servers=("git",)`` starts each named server inside the episode's sandbox
when the episode starts (so the server works on the files the agent's shell changes, and reaches
nothing else), lists its tools to the model after the workspace's own, and stops it before grading
(the hidden check never runs while a server still holds the workspace). The servers are data: a name,
the Python module that serves, and its arguments given the working directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envsuite.adapters.mcp import McpServer, server_module_available
from envsuite.envs.workspace._session import WorkspaceSession

if TYPE_CHECKING:
    from envsuite.adapters.mcp import McpToolbox


@dataclass(frozen=True)
class WorkspaceMcpServer:
    """One server a workspace env may start: ``python -m module *arguments(workdir)`` in the sandbox."""

    module: str
    arguments: Callable[[str], tuple[str, ...]]
    call_timeout_s: float = 30.0

    def server(self, workdir: str) -> McpServer:
        return McpServer.python_module(
            self.module, *self.arguments(workdir), call_timeout_s=self.call_timeout_s
        )


WORKSPACE_MCP_SERVERS: dict[str, WorkspaceMcpServer] = {
    # mcp-server-git, confined to the workspace's repository (it refuses paths outside ``--repository``).
    "git": WorkspaceMcpServer("mcp_server_git", lambda workdir: ("--repository", f"{workdir}/repo")),
    # mcp-server-time with the zone fixed, so no answer depends on the host's.
    "time": WorkspaceMcpServer("mcp_server_time", lambda _workdir: ("--local-timezone", "UTC")),
}
"""The servers a workspace env can name (``mcp_servers=``), by name."""


def unknown_servers(names: Sequence[str]) -> list[str]:
    """Names that are not in :data:`WORKSPACE_MCP_SERVERS`."""
    return [n for n in names if n not in WORKSPACE_MCP_SERVERS]


def missing_servers(names: Sequence[str]) -> str | None:
    """Why the named servers cannot start here (None when every one is installed)."""
    missing = [n for n in names if not server_module_available(WORKSPACE_MCP_SERVERS[n].module)]
    if not missing:
        return None
    modules = ", ".join(WORKSPACE_MCP_SERVERS[n].module for n in missing)
    return f"needs the MCP servers {modules} (`make install` puts them in .venv/mcp-servers)"


def start_toolboxes(session: WorkspaceSession, names: Sequence[str], workdir: str) -> list[McpToolbox]:
    """Start each named server in ``session``'s sandbox; the started toolboxes, in order. A server that
    cannot start closes the ones already started and raises :class:`McpStartError`."""
    from envsuite.adapters.mcp import McpToolbox  # the SDK loads only where a server is asked for

    started: list[McpToolbox] = []
    try:
        for name in names:
            box = McpToolbox(WORKSPACE_MCP_SERVERS[name].server(workdir), sandbox=session.box)
            box.start()
            started.append(box)
    except BaseException:
        for box in started:
            box.close()
        raise
    return started
