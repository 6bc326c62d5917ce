"""Run one program in a session's scratch root and watch it: output caps, wall clock, disk, the kill.

Phases of :func:`execute`: start (bwrap, or prlimit alone when unisolated, as the unprivileged host
uid, in a new session, with an empty environment and no inherited descriptors), attach to the run's
cgroup, watch (pipes, the process's pidfd, deadlines, the caller's cancel event), kill everything that
is left (its CPU time read from ``/proc`` first), reap (rusage: CPU time of what was reaped), and
attribute the end to a :class:`Limit`.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envsuite.sandbox._cgroup import CgroupEvents, CgroupKind, RunCgroup
from envsuite.sandbox._layout import INIT_ARGV, bwrap_argv, prlimit_argv, program_env
from envsuite.sandbox._support import SandboxSupport
from envsuite.sandbox._types import Isolation, Limit, Limits, RunResult, SandboxCancelledError, SandboxError

_READ_CHUNK = 1 << 16
_DISK_POLL_S = 0.25
_DRAIN_S = 1.0
"""After the program exits, how long its pipes may stay open (a grandchild holding them) before the
rest is killed and what was read is kept."""
_SYNC_TIMEOUT_S = 10.0
_MAX_SCAN_ENTRIES = 200_000
_SLOTS = threading.BoundedSemaphore(max(2, 2 * (os.cpu_count() or 1)))
"""Runs at once in this process; more wait their turn (their wall clock starts when they start)."""
_CANCEL_POLL_S = 0.05
"""How often a cancellable run (and one waiting for a slot) looks at its cancel event."""

_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_PROCESS_MARKERS = (
    "BlockingIOError: [Errno 11]",
    "can't start new thread",
    "fork: retry",
    "fork: Resource temporarily unavailable",
    "pthread_create failed",
)
"""Refused forks, as Python, bash and C runtimes report them (specific enough to trust on exit 0)."""
_FILE_SIZE_MARKERS = ("File too large", "[Errno 27]")
_DISK_MARKERS = ("No space left on device", "[Errno 28]")


@dataclass
class _Watch:
    """Mutable state of one run while it is watched."""

    limits: Limits
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    killed_for: Limit = Limit.NONE
    truncated: bool = False
    exited: bool = False
    cancel: threading.Event | None = None
    """Set by another thread when nobody waits for the run any more: it is killed at once."""

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


def execute(
    support: SandboxSupport,
    root: Path,
    argv: Sequence[str],
    *,
    limits: Limits,
    stdin: bytes | None = None,
    cwd: str,
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run ``argv`` in the sandbox rooted at ``root`` under ``limits``; never raises for the program.

    ``cancel``: once set (from any thread), the run is killed, or never started if it is still waiting
    for a slot, and :class:`SandboxCancelledError` is raised instead of a result.
    """
    _take_slot(cancel)
    try:
        cgroup = _make_cgroup(support, limits)
        try:
            return _execute(support, root, list(argv), _Watch(limits, cancel=cancel), stdin, cwd, env, cgroup)
        finally:
            if cgroup is not None:
                cgroup.remove()
    finally:
        _SLOTS.release()


def _take_slot(cancel: threading.Event | None) -> None:
    while not _SLOTS.acquire(timeout=None if cancel is None else _CANCEL_POLL_S):
        if cancel is not None and cancel.is_set():
            raise SandboxCancelledError("the run was cancelled while it waited for a slot")


def _make_cgroup(support: SandboxSupport, limits: Limits) -> RunCgroup | None:
    if support.cgroups.kind is CgroupKind.NONE:
        return None
    # The cgroup holds the sandbox's processes only (not the outer bwrap), the same ones its RLIMIT_NPROC
    # counts; one fewer here makes the cgroup refuse first and say so in pids.events.
    try:
        return RunCgroup(support.cgroups, limits.memory_mb << 20, limits.processes - 1)
    except OSError:
        return None  # the hierarchy went away (or became read-only): the rlimits still hold


def _command(
    support: SandboxSupport,
    root: Path,
    argv: list[str],
    limits: Limits,
    cwd: str,
    env: Mapping[str, str] | None,
    sync_fds: tuple[int, int] | None,
) -> tuple[list[str], str]:
    """The full command line and the host directory it starts in."""
    limited = [*prlimit_argv(support.prlimit, limits), *argv]
    if support.isolation is Isolation.NONE or support.bwrap is None:
        host_cwd = root / cwd.lstrip("/")
        return limited, str(host_cwd if host_cwd.is_dir() else root / "work")
    wrapper = bwrap_argv(
        support.bwrap, root, limits=limits, env=program_env(env, root=None), cwd=cwd, sync_fds=sync_fds
    )
    return [*wrapper, *prlimit_argv(support.prlimit, limits), *INIT_ARGV, *argv], str(root)


def _execute(
    support: SandboxSupport,
    root: Path,
    argv: list[str],
    watch: _Watch,
    stdin: bytes | None,
    cwd: str,
    env: Mapping[str, str] | None,
    cgroup: RunCgroup | None,
) -> RunResult:
    limits = watch.limits
    isolated = support.isolation is Isolation.BWRAP
    info_r, info_w, block_r, block_w = (*os.pipe(), *os.pipe()) if cgroup and isolated else (-1,) * 4
    sync = (info_w, block_r) if info_w >= 0 else None
    command, host_cwd = _command(support, root, argv, limits, cwd, env, sync)
    start = time.monotonic()
    try:
        proc = _start(
            support,
            command,
            host_cwd,
            stdin,
            env={} if isolated else program_env(env, root=root),
            pass_fds=sync or (),
        )
    except OSError as exc:
        for fd in (info_r, info_w, block_r, block_w):
            if fd >= 0:
                os.close(fd)
        raise SandboxError(f"could not start the sandbox: {exc}") from exc
    tree_cpu_s = 0.0
    try:
        if sync is not None and cgroup is not None:
            os.close(info_w)
            os.close(block_r)
            _attach(proc.pid, info_r, block_w, cgroup)
        elif cgroup is not None:
            cgroup.attach(proc.pid)  # unisolated runs: best effort, the program may fork first
        _watch(proc, watch, stdin, root, start)
    finally:
        if not watch.exited or watch.killed_for is not Limit.NONE:
            tree_cpu_s = _tree_cpu_s(proc.pid)  # before the kill: nobody reports a killed tree's time
        _kill_all(proc, cgroup)
        cpu_s, status = _reap(proc)
    if watch.cancelled:
        raise SandboxCancelledError("the run was cancelled (killed with its whole process tree)")
    return _result(watch, status, max(cpu_s, tree_cpu_s), time.monotonic() - start, isolated, cgroup)


def _start(
    support: SandboxSupport,
    command: list[str],
    host_cwd: str,
    stdin: bytes | None,
    *,
    env: Mapping[str, str],
    pass_fds: tuple[int, ...],
) -> subprocess.Popen[bytes]:
    """The process, as the unprivileged host uid, in a new session, with nothing inherited."""
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=host_cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
        user=support.run_as,
        group=support.run_as,
        extra_groups=[] if support.run_as is not None else None,
    )


def _result(
    watch: _Watch, status: int, cpu_s: float, wall_s: float, isolated: bool, cgroup: RunCgroup | None
) -> RunResult:
    exit_code = _exit_code(status)
    stderr = watch.err.decode("utf-8", "replace")
    limit = watch.killed_for
    events = cgroup.events() if cgroup is not None else None
    if limit is Limit.NONE:
        limit = _attribute(exit_code, cpu_s, watch.limits, stderr, events)
    elif limit is Limit.WALL_TIME:
        limit = _hit_before_the_clock(stderr, events) or limit
    return RunResult(
        stdout=watch.out.decode("utf-8", "replace"),
        stderr=stderr,
        exit_code=exit_code,
        limit=limit,
        wall_s=round(wall_s, 6),
        cpu_s=round(cpu_s, 6),
        isolated=isolated,
        truncated=watch.truncated,
    )


def _attach(pid: int, info_r: int, block_w: int, cgroup: RunCgroup) -> None:
    """Read bwrap's child pid (the sandbox's pid 1-to-be), move it into the cgroup, then let the program
    start. Only the child: each move waits for the kernel to sync (milliseconds on a loaded VM), and the
    outer bwrap only waits and reports."""
    try:
        info = _read_json(info_r, deadline=time.monotonic() + _SYNC_TIMEOUT_S)
        child = info.get("child-pid") if info else None
        with contextlib.suppress(OSError):
            cgroup.attach(child if isinstance(child, int) else pid)
        with contextlib.suppress(OSError):
            os.write(block_w, b"x")
    finally:
        os.close(info_r)
        os.close(block_w)


def _read_json(fd: int, *, deadline: float) -> dict[str, object] | None:
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            data += chunk
            with contextlib.suppress(ValueError):
                parsed = json.loads(data)
                return parsed if isinstance(parsed, dict) else None
    return None


def _watch(
    proc: subprocess.Popen[bytes], watch: _Watch, stdin: bytes | None, root: Path, start: float
) -> None:
    """Pump stdin/stdout/stderr until the program exits and its pipes close, or a limit ends it."""
    assert proc.stdout is not None and proc.stderr is not None
    pidfd = os.pidfd_open(proc.pid)
    pending = memoryview(stdin or b"")
    deadline = start + watch.limits.wall_s
    next_disk = start + _DISK_POLL_S
    drain_until: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, watch.out)
        sel.register(proc.stderr, selectors.EVENT_READ, watch.err)
        sel.register(pidfd, selectors.EVENT_READ, None)
        if proc.stdin is not None:
            sel.register(proc.stdin, selectors.EVENT_WRITE, None)
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    watch.killed_for = Limit.WALL_TIME
                    return
                if drain_until is not None and now >= drain_until:
                    return
                if watch.cancelled:
                    return
                if now >= next_disk:
                    if _scratch_bytes(root) > watch.limits.disk_mb << 20:
                        watch.killed_for = Limit.DISK
                        return
                    next_disk = now + _DISK_POLL_S
                wait = min(deadline, next_disk, drain_until or deadline) - now
                if watch.cancel is not None:
                    wait = min(wait, _CANCEL_POLL_S)
                for key, _ in sel.select(max(0.0, wait)):
                    if key.fileobj is pidfd:
                        sel.unregister(pidfd)
                        watch.exited = True
                        drain_until = time.monotonic() + _DRAIN_S
                    elif key.fileobj is proc.stdin:
                        pending = _feed(sel, proc, pending)
                    elif not _pump(sel, key, watch):
                        return
                if watch.exited and not any(k.data is not None for k in sel.get_map().values()):
                    return
        finally:
            os.close(pidfd)


def _tree_cpu_s(root_pid: int) -> float:
    """CPU seconds (user + system, reaped children included) of ``root_pid`` and its live descendants.

    ``wait4`` reports the tree's time only through processes that reaped their children; a tree killed
    at a limit is reaped by nobody who reports, so a run that spun to its wall clock would seem to have
    used no CPU. Read from ``/proc`` just before the kill, every live process's own time plus what it
    reaped covers the tree (inside bubblewrap too: the host sees the sandbox's processes)."""
    parent_of: dict[int, int] = {}
    ticks_of: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue  # ended meanwhile
            fields = stat[stat.rindex(b")") + 2 :].split()
            pid = int(entry.name)
            parent_of[pid] = int(fields[1])
            ticks_of[pid] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += ticks_of.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def _feed(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview) -> memoryview:
    assert proc.stdin is not None
    try:
        written = os.write(proc.stdin.fileno(), pending[:_READ_CHUNK])
    except (BrokenPipeError, OSError):
        written = len(pending)
    pending = pending[written:]
    if not pending:
        sel.unregister(proc.stdin)
        with contextlib.suppress(OSError):
            proc.stdin.close()
    return pending


def _pump(sel: selectors.BaseSelector, key: selectors.SelectorKey, watch: _Watch) -> bool:
    """Read one chunk into its buffer; False when the output limit ends the run."""
    fd = key.fd
    chunk = os.read(fd, _READ_CHUNK)
    if not chunk:
        sel.unregister(key.fileobj)
        return True
    buffer: bytearray = key.data
    room = watch.limits.output_bytes - len(buffer)
    buffer += chunk[: max(0, room)]
    if len(chunk) > room:
        watch.truncated = True
        watch.killed_for = Limit.OUTPUT
        return False
    return True


def _scratch_bytes(root: Path) -> int:
    """Disk used under the scratch root (not following links, not crossing into mounts)."""
    total, seen = 0, 0
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > _MAX_SCAN_ENTRIES:
                return 1 << 62  # that many files is itself over any disk quota
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def _kill_all(proc: subprocess.Popen[bytes], cgroup: RunCgroup | None) -> None:
    """SIGKILL bwrap's process group (its --die-with-parent child takes the pid namespace down) and
    every member of the cgroup."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _reap(proc: subprocess.Popen[bytes]) -> tuple[float, int]:
    """Wait for the process; its rusage covers every descendant bwrap's init reaped."""
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0.0, proc.returncode or 0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, status


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255


def _hit_before_the_clock(stderr: str, events: CgroupEvents | None) -> Limit | None:
    """A limit the run hit before its wall clock ran out: a fork bomb's shell retries refused forks, a
    tree whose child the OOM killer took waits for the others. That limit is the one it hit first."""
    if events is not None and events.oom_killed:
        return Limit.MEMORY
    if (events is not None and events.pids_refused) or any(m in stderr[-4000:] for m in _PROCESS_MARKERS):
        return Limit.PROCESSES
    return None


def _attribute(
    exit_code: int, cpu_s: float, limits: Limits, stderr: str, events: CgroupEvents | None
) -> Limit:
    """Which limit ended a run the runner did not stop itself (cgroup events, signals, then messages)."""
    oom = events is not None and events.oom_killed
    pids = events is not None and events.pids_refused
    if oom:
        return Limit.MEMORY
    if exit_code == 128 + signal.SIGXCPU or (
        exit_code == 128 + signal.SIGKILL and cpu_s >= limits.cpu_s * 0.8
    ):
        return Limit.CPU_TIME
    if exit_code == 128 + signal.SIGXFSZ:
        return Limit.FILE_SIZE
    tail = stderr[-4000:]
    if pids or any(m in tail for m in _PROCESS_MARKERS):
        return Limit.PROCESSES
    if exit_code == 0:
        return Limit.NONE
    # The program saw a refused request and exited on its own: read its last words.
    for markers, limit in (
        (_MEMORY_MARKERS, Limit.MEMORY),
        (_FILE_SIZE_MARKERS, Limit.FILE_SIZE),
        (_DISK_MARKERS, Limit.DISK),
    ):
        if any(m in tail for m in markers):
            return limit
    return Limit.NONE
