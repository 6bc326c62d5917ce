"""The workspace envs' catalog entries: plain data, nothing of the workspace loads until an env is made.

``envsuite/_catalog.py`` calls :func:`register_workspace_envs` once. Ids: ``workspace/<family>_easy``,
``workspace/<family>``, ``workspace/<family>_hard`` for the three procedural families (rungs 0-2),
``harbor/<task>`` for each task shipped in ``envsuite/envs/workspace/tasks/``, and the scheme
``harbor:PATH`` for any Harbor-format task folder (refused with the reason where it needs a Docker build).
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

from envsuite.registration import EnvKind, register, register_scheme

TASKS_DIR = Path(__file__).with_name("tasks")
"""The Harbor-format tasks shipped with envsuite (one folder each)."""
_FAMILIES = {
    "shell": (
        "envsuite.envs.workspace._shell:ShellEnv",
        (
            "Count log lines or sum a CSV column in a sandboxed workspace; the answer file is checked after.",
            "Filter JSON with a shell, or total an sqlite table; the output file is checked after.",
            "Write a shell script; it is graded on log files the agent never saw.",
        ),
    ),
    "repo": (
        "envsuite.envs.workspace._repo:RepoEnv",
        (
            "A generated Python project with a failing test and an issue; a hidden test suite grades the fix.",
            "A bug named only in an issue (the visible tests pass); a hidden test suite grades the fix.",
            "A missing feature described in an issue; a hidden test suite grades the implementation.",
        ),
    ),
    "git": (
        "envsuite.envs.workspace._git:GitEnv",
        (
            "Make a branch with a commit in a generated git repository; its refs and trees are checked.",
            "Merge a branch whose change conflicts, resolving as the issue says; the merge commit is checked.",
            "Bisect a history to the commit that broke a test; the hash written is checked.",
        ),
    ),
}
_SUFFIX = ("_easy", "", "_hard")
_NEEDS = {"git": ("git",)}
"""Programs of the sandbox's system a family's setup and checks run (``shell`` builds its database
with Python's own ``sqlite3``; ``repo`` needs only python3)."""
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
"""Where the sandbox finds programs (its ``PATH``; ``/usr`` is the host's, read-only)."""


def missing_programs(names: tuple[str, ...] | list[str]) -> str | None:
    """Why programs the sandbox's system lacks keep an env from running (None when all are there)."""
    missing = [n for n in names if shutil.which(n, path=SYSTEM_PATH) is None]
    if not missing:
        return None
    return f"needs {', '.join(missing)} in the sandbox's system (`make install`, or apt-get install {' '.join(missing)})"


def declared_programs(task_dir: Path) -> list[str]:
    """The programs a Harbor task says it runs: ``[metadata] requires = [...]`` in its task.toml."""
    try:
        metadata = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    needs = metadata.get("requires", []) if isinstance(metadata, dict) else []
    return [str(n) for n in needs] if isinstance(needs, list) else []


def register_workspace_envs(unavailable: str | None = None) -> None:
    """Register the workspace families, the shipped Harbor tasks and the ``harbor:`` scheme;
    ``unavailable``: why the sandbox cannot run here (the envs are then listed, not made)."""
    common: dict[str, Any] = {
        "kind": EnvKind.MULTI_TURN,
        "reward_range": (-0.1, 1.0),
        "max_turns": 10,
        "unavailable": unavailable,
        "family": "workspace",
    }
    for family, (entry_point, descriptions) in _FAMILIES.items():
        for rung, description in enumerate(descriptions):
            register(
                f"workspace/{family}{_SUFFIX[rung]}-v0",
                entry_point=entry_point,
                # The first rung shows a worked bash call first, as the tool envs' easy rungs do.
                kwargs={"rung": rung, **({"demonstrate": True} if rung == 0 else {})},
                description=description,
                tags=("workspace", "agentic", f"workspace-{family}"),
                **{**common, "unavailable": unavailable or missing_programs(_NEEDS.get(family, ()))},
            )
    register(
        "workspace/shell_intro-v0",
        entry_point=_FAMILIES["shell"][0],
        # Below rung 0: one command a task, close to the worked call shown first; the bash tool alone
        # (the prompt is a third as long) and three turns (the command, a look, a closing reply).
        kwargs={
            "rung": 0,
            "kinds": ("line_count", "word_count", "first_line", "last_line", "grep_count", "write_text"),
            "demonstrate": True,
            "max_turns": 3,
            "tools": ("bash",),
        },
        description="One shell command a task (count lines or words, a file's first or last line, grep -c, "
        "write a text); the output file is checked after.",
        tags=("workspace", "agentic", "workspace-shell"),
        **{**common, "max_turns": 3},
    )
    register(
        "workspace/git_mcp-v0",
        entry_point=_FAMILIES["git"][0],
        kwargs={"rung": 0, "mcp_servers": ("git",)},
        description="Make a branch with a commit, with mcp-server-git's tools (MCP, in the episode's sandbox) "
        "beside the shell; its refs and trees are checked.",
        tags=("workspace", "agentic", "workspace-git", "mcp"),
        **{**common, "unavailable": unavailable or _git_mcp_unavailable()},
    )
    for folder in sorted(p for p in TASKS_DIR.iterdir() if (p / "task.toml").is_file()):
        register(
            f"harbor/{folder.name}-v0",
            entry_point="envsuite.envs.workspace._harbor:HarborEnv",
            kwargs={"task_dir": str(folder)},
            description=_first_line(folder / "instruction.md"),
            tags=("workspace", "agentic", "harbor"),
            **{**common, "unavailable": unavailable or missing_programs(declared_programs(folder))},
        )
    register_scheme("harbor", "envsuite.envs.workspace._harbor:harbor_spec")


def _git_mcp_unavailable() -> str | None:
    from envsuite.envs.workspace._mcp import missing_servers  # the mcp adapter's config: no SDK import

    return missing_programs(_NEEDS["git"]) or missing_servers(("git",))


def _first_line(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return "A Harbor-format task."
    line = next((s.strip("# ").strip() for s in text.splitlines() if s.strip()), "")
    return f"Harbor task: {line[:120]}"
