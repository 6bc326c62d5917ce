"""The workspace's tools, as envsuite tools: ``bash``, ``python``, ``read_file``, ``write_file``, ``edit_file``.

Each is a :class:`envsuite.tools.Tool` bound to one :class:`WorkspaceSession`; renderers show them in
each model family's tool format like any other tool. Their names and arguments follow what agent
harnesses give models (mini-swe-agent's and Terminus' one shell tool; SWE-agent's and Claude's
``str_replace`` edit with its unique-match rule; a line-range file view). A result is the
:class:`CallResult`'s text; a refused file call is a failed call (``Error: ...``), and a spent episode
budget ends the episode (``should_stop``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envsuite.core import ToolInput, ToolResult
from envsuite.envs.workspace._limits import Outcome
from envsuite.envs.workspace._session import VIEW_LINES, CallResult, WorkspaceSession

TOOL_NAMES = ("bash", "python", "read_file", "write_file", "edit_file")


def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = _string("File path; relative paths start at the working directory")
_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "bash": (
        "Run a bash command line in the workspace (no network) and return its exit code and output. "
        "Files persist between calls.",
        _schema({"command": _string("The command line")}, ["command"]),
    ),
    "python": (
        "Run a Python 3 script in the workspace's working directory and return its exit code and output.",
        _schema({"code": _string("The script's source")}, ["code"]),
    ),
    "read_file": (
        f"Show lines of a text file, numbered (at most {VIEW_LINES} per call).",
        _schema(
            {
                "path": _PATH,
                "start_line": {"type": "integer", "description": "First line to show (1-based; default 1)"},
                "end_line": {"type": "integer", "description": "Last line to show (default: the end)"},
            },
            ["path"],
        ),
    ),
    "write_file": (
        "Create or overwrite a file with the given content (parent directories are made).",
        _schema({"path": _PATH, "content": _string("The whole new content")}, ["path", "content"]),
    ),
    "edit_file": (
        "Replace one exact occurrence of old_string in a file with new_string; old_string must occur "
        "exactly once (add surrounding lines to make it unique).",
        _schema(
            {"path": _PATH, "old_string": _string("Text to replace"), "new_string": _string("Replacement")},
            ["path", "old_string", "new_string"],
        ),
    ),
}


@dataclass(frozen=True)
class WorkspaceTool:
    """One workspace verb as a :class:`~envsuite.tools.Tool` (arguments are checked against the schema
    by :func:`envsuite.tools.run_tool_call` before ``run``)."""

    name: str
    description: str
    parameters_schema: dict[str, Any]
    call: Callable[[dict[str, Any]], CallResult]

    async def run(self, input: ToolInput) -> ToolResult:
        result = await asyncio.to_thread(self.call, input.arguments)
        text = result.text if result.outcome is not Outcome.REFUSED else f"Error: {result.text}"
        metadata = (
            {"error": "failed", "outcome": result.outcome.value} if result.outcome is Outcome.REFUSED else {}
        )
        message: dict[str, Any] = {"role": "tool", "content": text, "name": self.name}
        if input.call_id:
            message["tool_call_id"] = input.call_id
        return ToolResult(
            [message],  # type: ignore[list-item]
            should_stop=result.outcome.ends_episode,
            metadata={**metadata, "outcome": result.outcome.value},
        )


def _line(value: object, default: int | None) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def workspace_tools(session: WorkspaceSession, names: tuple[str, ...] = TOOL_NAMES) -> list[WorkspaceTool]:
    """The tools named (default: all five), bound to ``session``."""
    unknown = set(names) - set(TOOL_NAMES)
    if unknown:
        raise ValueError(f"unknown workspace tools {sorted(unknown)}; the tools are {TOOL_NAMES}")
    verbs: dict[str, Callable[[dict[str, Any]], CallResult]] = {
        "bash": lambda a: session.run_shell(str(a["command"])),
        "python": lambda a: session.run_python(str(a["code"])),
        "read_file": lambda a: session.read_file(
            str(a["path"]), _line(a.get("start_line"), 1) or 1, _line(a.get("end_line"), None)
        ),
        "write_file": lambda a: session.write_file(str(a["path"]), str(a["content"])),
        "edit_file": lambda a: session.edit_file(str(a["path"]), str(a["old_string"]), str(a["new_string"])),
    }
    return [WorkspaceTool(n, _SCHEMAS[n][0], _SCHEMAS[n][1], verbs[n]) for n in TOOL_NAMES if n in names]
