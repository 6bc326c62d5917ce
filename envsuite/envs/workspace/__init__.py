"""Agents in a workspace: a sandboxed shell and file system per episode, task families, Harbor's format.

* :class:`WorkspaceSession`: one :mod:`envsuite.sandbox` session per episode whose files persist
  across turns, with the verbs agents use (shell, Python, read/write/edit a file) and limits per
  command and per episode, each an :class:`Outcome` the model reads.
* :func:`workspace_tools`: those verbs as envsuite tools (``bash``, ``python``, ``read_file``,
  ``write_file``, ``edit_file``), rendered in each model family's tool format.
* :class:`WorkspaceEnv`: the episode; the families ``workspace/shell``, ``workspace/repo``,
  ``workspace/git`` (rungs ``_easy``, plain, ``_hard``), graded by hidden checks after the episode.
* :class:`HarborEnv` / :func:`load_harbor_task`: Harbor's task format (``instruction.md``,
  ``task.toml``, ``tests/test.sh``, ``solution/solve.sh``) as catalog envs: ``harbor/<name>`` for the
  shipped tasks, ``harbor:PATH`` for any folder whose environment the sandbox can meet.

docs/workspace.md has the whole story. The names load on first use (``import envsuite`` registers the
catalog entries without loading any of this).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envsuite.envs.workspace._env import Attack, WorkspaceEnv, WorkspaceSetupError, WorkspaceTask
    from envsuite.envs.workspace._git import GitEnv
    from envsuite.envs.workspace._harbor import (
        HarborEnv,
        HarborTask,
        HarborTaskError,
        harbor_spec,
        load_harbor_task,
        shipped_tasks,
    )
    from envsuite.envs.workspace._limits import Outcome, WorkspaceLimits
    from envsuite.envs.workspace._mcp import WORKSPACE_MCP_SERVERS, WorkspaceMcpServer
    from envsuite.envs.workspace._repo import RepoEnv
    from envsuite.envs.workspace._session import CallResult, WorkspaceSession
    from envsuite.envs.workspace._shell import ShellEnv
    from envsuite.envs.workspace._tools import TOOL_NAMES, WorkspaceTool, workspace_tools

_EXPORTS = {
    # the session and its tools
    "WorkspaceSession": "_session",
    "CallResult": "_session",
    "Outcome": "_limits",
    "WorkspaceLimits": "_limits",
    "TOOL_NAMES": "_tools",
    "WorkspaceTool": "_tools",
    "workspace_tools": "_tools",
    "WORKSPACE_MCP_SERVERS": "_mcp",
    "WorkspaceMcpServer": "_mcp",
    # the episode and its families
    "WorkspaceEnv": "_env",
    "WorkspaceTask": "_env",
    "WorkspaceSetupError": "_env",
    "Attack": "_env",
    "ShellEnv": "_shell",
    "RepoEnv": "_repo",
    "GitEnv": "_git",
    # Harbor's task format
    "HarborEnv": "_harbor",
    "HarborTask": "_harbor",
    "HarborTaskError": "_harbor",
    "harbor_spec": "_harbor",
    "load_harbor_task": "_harbor",
    "shipped_tasks": "_harbor",
}

__all__ = [
    # the session and its tools
    "WorkspaceSession",
    "CallResult",
    "Outcome",
    "WorkspaceLimits",
    "TOOL_NAMES",
    "WorkspaceTool",
    "workspace_tools",
    "WORKSPACE_MCP_SERVERS",
    "WorkspaceMcpServer",
    # the episode and its families
    "WorkspaceEnv",
    "WorkspaceTask",
    "WorkspaceSetupError",
    "Attack",
    "ShellEnv",
    "RepoEnv",
    "GitEnv",
    # Harbor's task format
    "HarborEnv",
    "HarborTask",
    "HarborTaskError",
    "harbor_spec",
    "load_harbor_task",
    "shipped_tasks",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
