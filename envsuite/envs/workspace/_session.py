"""A workspace session: one sandbox per episode whose files persist across turns, and the agent's verbs.

The session owns one :class:`envsuite.sandbox.Sandbox` (bubblewrap, no network, a private root that
persists between runs and is removed at :meth:`WorkspaceSession.close`). Its verbs are what agent
harnesses give a model: run a shell line, run Python, read a file (a line-range view), write a file,
edit a file (replace one exact, unique string). Each returns a :class:`CallResult`: an
:class:`~envsuite.envs.workspace._limits.Outcome` and the text the model sees. Nothing the agent does
raises: limits, missing files, refused paths are outcomes.

Invariants:

* Commands run in the session's working directory (``/work``; Harbor tasks use ``/app``), with a
  fixed environment (git identity and dates included, so commits hash the same on every run).
* Every command is bounded by the per-command limits within what the episode has left; once an
  episode budget is spent, no command runs (``EPISODE_TIME``/``EPISODE_COMMANDS``).
* File calls go through the sandbox's host-side file API: links are never followed, ``..`` stays in
  the sandbox, the read-only system mounts are refused for writes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from envsuite.envs.workspace._limits import Outcome, Usage, WorkspaceLimits, outcome_of
from envsuite.sandbox import RunResult, Sandbox, SandboxConfig, SandboxError

WORKDIR = "/work"
"""The default working directory (the sandbox's ``HOME``)."""
VIEW_LINES = 200
"""Most lines one ``read_file`` call shows."""
COMMAND_ENV: Mapping[str, str] = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@workspace.invalid",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@workspace.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "TERM": "dumb",
}
"""Every command's environment besides the sandbox's own: a git identity and fixed dates (commits hash
the same on every run of a seed), and no pager (nothing waits for a terminal)."""


@dataclass(frozen=True)
class CallResult:
    """One workspace call, done: how it ended, and what the model reads."""

    outcome: Outcome
    text: str
    exit_code: int | None = None
    """A command's exit status (None for file calls and commands that never ran)."""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK and self.exit_code in (None, 0)


class WorkspaceSession:
    """One episode's workspace (see the module docstring). Use as a context manager, or :meth:`close`."""

    def __init__(
        self,
        limits: WorkspaceLimits | None = None,
        *,
        workdir: str = WORKDIR,
        config: SandboxConfig | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: extra environment variables for every command (over :data:`COMMAND_ENV`).
        Raises :class:`~envsuite.sandbox.SandboxUnavailableError` where the sandbox cannot isolate."""
        self.limits = limits or WorkspaceLimits()
        self.workdir = posixpath.normpath("/" + workdir.lstrip("/"))
        self.box = Sandbox(config)
        self.env = {**COMMAND_ENV, **(env or {})}
        self.usage = Usage()
        if self.workdir != WORKDIR:
            self.box.run(["mkdir", "-p", self.workdir])

    # -- commands ------------------------------------------------------------------------------

    def run_shell(self, command: str) -> CallResult:
        """Run a bash command line in the working directory."""
        return self._command(["bash", "-c", command])

    def run_python(self, code: str) -> CallResult:
        """Run Python source as a script in the working directory (it may import files there)."""
        spent = self._spent()
        if spent is not None:
            return spent
        name = ".workspace-run.py"
        try:
            self.box.write_bytes(self.path(name), code.encode("utf-8", "surrogatepass"))
        except (OSError, SandboxError) as exc:
            return CallResult(Outcome.REFUSED, f"could not write the script: {exc}")
        try:
            return self._command([self.box.config.python, name])
        finally:
            self.box.run(["rm", "-f", name], cwd=self.workdir)

    def run_setup(self, command: str) -> RunResult:
        """Run a task's own setup or grading command (not counted against the agent's budget)."""
        limits = self.limits.command(self.limits.command_wall_s * 3, self.limits.command_cpu_s * 3)
        return self.box.run(["bash", "-c", command], cwd=self.workdir, env=self.env, limits=limits)

    def _spent(self) -> CallResult | None:
        done = self.usage.exhausted(self.limits)
        if done is None:
            return None
        what = (
            f"{self.limits.episode_commands} commands"
            if done is Outcome.EPISODE_COMMANDS
            else f"{self.limits.episode_wall_s:g} s of wall time or {self.limits.episode_cpu_s:g} s of CPU time"
        )
        return CallResult(done, f"stopped ({done.value}): the episode's budget of {what} is spent")

    def _command(self, argv: list[str]) -> CallResult:
        spent = self._spent()
        if spent is not None:
            return spent
        u, lim = self.usage, self.limits
        limits = lim.command(lim.episode_wall_s - u.wall_s, lim.episode_cpu_s - u.cpu_s)
        run = self.box.run(argv, cwd=self.workdir, env=self.env, limits=limits)
        u.commands += 1
        u.wall_s += run.wall_s
        u.cpu_s += run.cpu_s
        outcome = outcome_of(run.limit)
        return CallResult(outcome, describe_run(run, outcome, limits.wall_s), run.exit_code)

    # -- files ---------------------------------------------------------------------------------

    def path(self, path: str) -> str:
        """``path`` as an absolute sandbox path (relative ones start at the working directory)."""
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def read_text(self, path: str) -> str:
        """A file's text (raises ``OSError``/``SandboxError`` as the sandbox does); for graders."""
        data = self.box.read_bytes(self.path(path), max_bytes=self.limits.file_size_mb << 20)
        return data.decode("utf-8", "replace")

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> CallResult:
        """Lines ``start_line``..``end_line`` (1-based, inclusive; at most :data:`VIEW_LINES`), numbered."""
        try:
            text = self.read_text(path)
        except (OSError, SandboxError) as exc:
            return CallResult(Outcome.REFUSED, f"cannot read {path}: {_reason(exc)}")
        lines = text.splitlines()
        first = max(1, start_line)
        last = min(len(lines), end_line if end_line is not None else len(lines), first + VIEW_LINES - 1)
        if not lines:
            return CallResult(Outcome.OK, f"({path} is empty)")
        if first > len(lines):
            return CallResult(Outcome.REFUSED, f"{path} has {len(lines)} lines; line {first} is past its end")
        shown = "\n".join(f"{n:>5}\t{lines[n - 1]}" for n in range(first, last + 1))
        more = len(lines) - last
        tail = f"\n({more} more lines; read from line {last + 1})" if more > 0 else ""
        return CallResult(Outcome.OK, shown + tail)

    def write_file(self, path: str, content: str) -> CallResult:
        """Create or replace a file (parents are made)."""
        data = content.encode("utf-8", "surrogatepass")
        if len(data) > self.limits.file_size_mb << 20:
            return CallResult(
                Outcome.REFUSED, f"content is over the {self.limits.file_size_mb} MB file limit"
            )
        try:
            self.box.write_bytes(self.path(path), data)
        except (OSError, SandboxError) as exc:
            return CallResult(Outcome.REFUSED, f"cannot write {path}: {_reason(exc)}")
        return CallResult(Outcome.OK, f"wrote {len(data)} bytes to {self.path(path)}")

    def edit_file(self, path: str, old: str, new: str) -> CallResult:
        """Replace the one occurrence of ``old`` in a file by ``new`` (refused when absent or repeated)."""
        try:
            text = self.read_text(path)
        except (OSError, SandboxError) as exc:
            return CallResult(Outcome.REFUSED, f"cannot read {path}: {_reason(exc)}")
        count = text.count(old) if old else 0
        if count != 1:
            why = "old is empty" if not old else ("not found" if count == 0 else f"found {count} times")
            hint = "" if count == 0 else "; add surrounding lines to make it unique"
            return CallResult(Outcome.REFUSED, f"no edit made to {path}: {why}{hint}")
        written = self.write_file(path, text.replace(old, new, 1))
        if written.outcome is not Outcome.OK:
            return written
        line = text[: text.index(old)].count("\n") + 1
        return CallResult(Outcome.OK, f"edited {self.path(path)} at line {line}")

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the workspace (idempotent)."""
        self.box.close()

    @property
    def closed(self) -> bool:
        return self.box.closed

    def __enter__(self) -> WorkspaceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "it is a directory"
    return str(exc) or type(exc).__name__


_STOPPED = {
    Outcome.WALL_TIME: "it ran past its {wall:.1f} s wall-clock limit and was killed",
    Outcome.CPU_TIME: "it used more than its CPU time and was killed",
    Outcome.MEMORY: "it ran out of memory",
    Outcome.PROCESSES: "it started too many processes",
    Outcome.FILE_SIZE: "it wrote a file past the file size limit",
    Outcome.OUTPUT: "its output passed the limit; the output is cut there and the command was killed",
    Outcome.DISK: "the workspace passed its disk quota; the command was killed",
}


def describe_run(run: RunResult, outcome: Outcome, wall_s: float) -> str:
    """A command's result as the model reads it: the exit code, a stop line, stdout, stderr."""
    parts = [f"exit code: {run.exit_code}"]
    if outcome is not Outcome.OK:
        parts.append(f"stopped ({outcome.value}): " + _STOPPED[outcome].format(wall=wall_s))
    if run.stdout:
        parts.append("[stdout]\n" + run.stdout.rstrip("\n"))
    if run.stderr:
        parts.append("[stderr]\n" + run.stderr.rstrip("\n"))
    if not run.stdout and not run.stderr:
        parts.append("(no output)")
    return "\n".join(parts)
