"""A long-lived program in a sandbox: started with pipes, talked to, killed with its tree on close.

:meth:`Sandbox.run` runs a program to completion; a server (an MCP server over stdio) must live for an
episode and answer on its pipes. :func:`spawn` starts one from the same command line as a run (bwrap's
namespaces with no network, the prlimit rlimits), plus extra read-only binds, and returns a
:class:`SandboxProcess`. Invariants:

* the process sees only its scratch root, the system mounts and its ``ro_binds``; no network;
* ``stdin``/``stdout`` are binary pipes the caller drives; stderr goes to a host file outside the root
  (a server that logs must never block on a full pipe nobody reads), kept for :meth:`stderr_tail`;
* :meth:`SandboxProcess.close` kills the whole tree (SIGKILL to bwrap's process group; its sandboxed
  child dies with it, ``--die-with-parent``, and as the pid namespace's init its death kills every
  process left inside) and reaps it; idempotent. The sandbox's own
  :meth:`~envsuite.sandbox.Sandbox.close` closes its processes before it removes the root.

What a run has and a spawned process has not: a wall clock (it lives until closed), output caps (the
caller reads what it wants), the disk poll, and a cgroup. Its rlimits (CPU time, address space,
processes inside its user namespace, file size, open files) hold as for a run; a cgroup is left out on
purpose: a server lives across many runs, and a run's cgroup alive after its sandbox's runs ended is
what the escape suite (``live_cgroups()``) flags as leaked.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from envsuite.sandbox._layout import INIT_ARGV, bwrap_argv, prlimit_argv, program_env
from envsuite.sandbox._runner import _kill_all, _reap
from envsuite.sandbox._support import SandboxSupport
from envsuite.sandbox._types import Isolation, Limits, SandboxError

_STDERR_TAIL = 4000


class SandboxProcess:
    """A spawned sandboxed program (see the module docstring). Thread-safe :meth:`close`."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr_path: Path) -> None:
        self._proc = proc
        self._stderr_path = stderr_path
        self._lock = threading.Lock()
        self._closed = False

    @property
    def pid(self) -> int:
        """The host pid of the outer bwrap (its process group is the whole tree's handle)."""
        return self._proc.pid

    @property
    def stdin(self) -> IO[bytes]:
        assert self._proc.stdin is not None
        return self._proc.stdin

    @property
    def stdout(self) -> IO[bytes]:
        assert self._proc.stdout is not None
        return self._proc.stdout

    def poll(self) -> int | None:
        """The exit status once it ended on its own (None while it runs)."""
        return None if self._closed else self._proc.poll()

    @property
    def closed(self) -> bool:
        return self._closed

    def stderr_tail(self, max_chars: int = _STDERR_TAIL) -> str:
        """The last ``max_chars`` of what it wrote to stderr (empty once its sandbox is removed)."""
        try:
            with open(self._stderr_path, "rb") as fh:
                fh.seek(max(0, self._stderr_path.stat().st_size - max_chars))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Kill the tree and reap it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _kill_all(self._proc, None)
        _reap(self._proc)


def spawn(
    support: SandboxSupport,
    root: Path,
    argv: Sequence[str],
    *,
    limits: Limits,
    cwd: str,
    env: dict[str, str] | None,
    ro_binds: Sequence[tuple[str, str]],
    stderr_path: Path,
) -> SandboxProcess:
    """Start ``argv`` in the sandbox rooted at ``root`` and return it running (isolated runs only)."""
    if support.isolation is not Isolation.BWRAP or support.bwrap is None:
        raise SandboxError("spawn needs bubblewrap isolation (a long-lived process is never run bare)")
    wrapper = bwrap_argv(
        support.bwrap,
        root,
        limits=limits,
        env=program_env(env, root=None),
        cwd=cwd,
        sync_fds=None,
        ro_binds=ro_binds,
    )
    command = [*wrapper, *prlimit_argv(support.prlimit, limits), *INIT_ARGV, *argv]
    try:
        with open(stderr_path, "wb") as errors:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                cwd=str(root),
                env={},
                start_new_session=True,
                close_fds=True,
                user=support.run_as,
                group=support.run_as,
                extra_groups=[] if support.run_as is not None else None,
            )
    except OSError as exc:
        raise SandboxError(f"could not start the sandbox: {exc}") from exc
    return SandboxProcess(proc, stderr_path)
