"""Per-run cgroups, where this process may make them: total memory and process caps, events, kill.

rlimits bound each process; a cgroup bounds the whole tree (a fork bomb of memory hogs), says which
limit fired (``oom_kill`` and ``pids.events``), and kills every member at the end. Both cgroup v2
(the parent's ``cgroup.subtree_control`` must already enable ``memory`` and ``pids``) and v1 (writable
``memory`` and ``pids`` hierarchies, e.g. as root in a VM) are used. Runs' cgroups are made *under this
process's own* cgroup, so whatever limits the host put on envsuite still apply to its sandboxes.
Where none is writable, runs go on with rlimits alone (``probe_cgroups().kind`` is ``NONE``).
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

_LIVE: set[str] = set()
"""Dirs of this process's run cgroups not yet removed (see :func:`live_cgroups`)."""
_V2_MOUNT_CANDIDATES = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
_CONTROLLERS = ("memory", "pids")
_REMOVE_WAIT_S = 2.0


class CgroupKind(enum.StrEnum):
    V2 = "v2"
    V1 = "v1"
    NONE = "none"


@dataclass(frozen=True)
class CgroupSupport:
    """Where per-run cgroups can be made: the parent directory of each controller (v2: one dir)."""

    kind: CgroupKind
    parents: tuple[tuple[str, str], ...] = ()
    """``(controller, parent dir)`` pairs; v2 lists one dir under both controllers."""
    reason: str = ""
    """Why no cgroup is used (for ``kind`` NONE)."""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fs type, options)`` of cgroup mounts."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                found.append((parts[1], parts[2], set(parts[3].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _try_mkdir(parent: Path) -> bool:
    probe = parent / f"envsuite-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _probe_v2(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupSupport | None:
    for mount_point, fs_type, _ in mounts:
        if fs_type != "cgroup2" or mount_point not in _V2_MOUNT_CANDIDATES:
            continue
        parent = Path(mount_point) / own.get("", "/").lstrip("/")
        try:
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        if set(_CONTROLLERS) <= enabled and _try_mkdir(parent):
            return CgroupSupport(CgroupKind.V2, tuple((c, str(parent)) for c in _CONTROLLERS))
    return None


def _probe_v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupSupport | None:
    parents = []
    for controller in _CONTROLLERS:
        mount = next((m for m, t, opts in mounts if t == "cgroup" and controller in opts), None)
        if mount is None:
            return None
        parent = Path(mount) / own.get(controller, "/").lstrip("/")
        if not _try_mkdir(parent):
            return None
        parents.append((controller, str(parent)))
    return CgroupSupport(CgroupKind.V1, tuple(parents))


def probe_cgroups() -> CgroupSupport:
    """Which kind of per-run cgroup this process can make (v2 preferred), or why none."""
    mounts, own = _mounts(), _own_paths()
    found = _probe_v2(mounts, own) or _probe_v1(mounts, own)
    if found is not None:
        return found
    return CgroupSupport(
        CgroupKind.NONE,
        reason="no writable cgroup with the memory and pids controllers (rlimits still apply per process)",
    )


@dataclass(frozen=True)
class CgroupEvents:
    """What the kernel recorded for one run's cgroup."""

    oom_killed: bool
    pids_refused: bool


class RunCgroup:
    """One run's cgroup (one dir per controller on v1). Make it, attach, read events, kill, remove."""

    def __init__(self, support: CgroupSupport, memory_bytes: int, max_pids: int) -> None:
        self.kind = support.kind
        name = f"envsuite-sandbox-{uuid.uuid4().hex[:12]}"
        self.dirs: dict[str, Path] = {}
        for controller, parent in support.parents:
            path = Path(parent) / name
            if path not in self.dirs.values():
                path.mkdir()
                _LIVE.add(str(path))
            self.dirs[controller] = path
        try:
            self._set_limits(memory_bytes, max_pids)
        except OSError:
            self.remove()
            raise

    def _set_limits(self, memory_bytes: int, max_pids: int) -> None:
        mem, pids = self.dirs["memory"], self.dirs["pids"]
        if self.kind is CgroupKind.V2:
            (mem / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (mem / "memory.swap.max").write_text("0")
        else:
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # only where swap accounting is on
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        (pids / "pids.max").write_text(str(max_pids))

    def attach(self, *pids: int) -> None:
        """Move processes in (before they fork: their children are born inside)."""
        for path in dict.fromkeys(self.dirs.values()):
            for pid in pids:
                (path / "cgroup.procs").write_text(str(pid))

    def events(self) -> CgroupEvents:
        mem, pids = self.dirs["memory"], self.dirs["pids"]
        oom_file = "memory.events" if self.kind is CgroupKind.V2 else "memory.oom_control"
        return CgroupEvents(
            oom_killed=_counter(mem / oom_file, "oom_kill") > 0,
            pids_refused=_counter(pids / "pids.events", "max") > 0,
        )

    def members(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every member (v2: ``cgroup.kill``; v1: each pid, until none is left)."""
        if self.kind is CgroupKind.V2:
            with contextlib.suppress(OSError):
                (self.dirs["pids"] / "cgroup.kill").write_text("1")
                return
        for _ in range(50):
            members = self.members()
            if not members:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Kill what is left and remove the dirs. Killed members are usually reaped within milliseconds;
        on a loaded machine (or after an OOM kill) it can take longer, and then a daemon thread
        finishes the job instead of the caller waiting."""
        self.kill()
        if not self._rmdirs(time.monotonic() + _REMOVE_WAIT_S):
            threading.Thread(target=self._remove_later, name="envsuite-cgroup-remove", daemon=True).start()

    def _remove_later(self) -> None:
        for _ in range(60):
            self.kill()
            if self._rmdirs(time.monotonic() + 1.0):
                return

    def _rmdirs(self, deadline: float) -> bool:
        """Remove every dir (retrying until ``deadline``); True when none is left."""
        for path in dict.fromkeys(self.dirs.values()):
            while str(path) in _LIVE:
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.005)
                    continue
                _LIVE.discard(str(path))
        return True


def live_cgroups() -> set[str]:
    """The run cgroups this process made and has not removed (empty between runs: none is leaked)."""
    return set(_LIVE)


def _counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0
