"""The sandbox layer's contracts: limits, the result of one run, isolation modes and errors.

This is the one file to read before running untrusted code with :mod:`envsuite.sandbox`.

Invariants every run keeps:

* A run is isolated (bubblewrap: no network, a read-only ``/usr``, a private writable root that is
  the session's scratch dir, its own pid/ipc/uts/cgroup namespaces, no capabilities) unless the
  caller opted into :attr:`Isolation.NONE`; then every :class:`RunResult` says ``isolated=False``.
  Where bubblewrap cannot run, making a sandbox raises :class:`SandboxUnavailableError` (never a
  silent fallback).
* Nothing is inherited: the environment is a fixed minimal one plus what the caller passes, and no
  file descriptor but stdin/stdout/stderr crosses into the sandbox.
* Every limit of :class:`Limits` is enforced by the kernel (rlimits set inside the sandbox, plus a
  per-run cgroup for total memory and processes where one is writable) or by the runner (wall time,
  output bytes, disk), and the whole process tree is killed when the run ends, whatever ended it.
* A run never raises on anything the program does: a limit hit, a crash, a signal, endless output all
  come back as a :class:`RunResult` whose :attr:`RunResult.limit` names the limit that stopped it.
"""

from __future__ import annotations

import enum
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

ISOLATION_ENV_VAR = "ENVSUITE_SANDBOX_ISOLATION"
"""Set to ``none`` to opt every default-configured sandbox into unisolated runs (marked in results)."""

SANDBOX_API_KEY_VAR = "ENVSUITE_SANDBOX_API_KEY"
"""Environment variable holding the key ``envsuite serve-sandbox`` requires of every request (``X-API-Key``
or ``Authorization: Bearer``); it must have one to listen beyond loopback."""
SANDBOX_WORKDIR = "/work"
"""The working directory and ``HOME`` inside the sandbox (under the scratch root)."""
SANDBOX_TMPDIR = "/tmp"
"""``TMPDIR`` inside the sandbox (under the scratch root, so it persists between runs of a session)."""


class Limit(enum.StrEnum):
    """Which limit ended a run (``NONE``: the program ended by itself)."""

    NONE = "none"
    """No limit was hit; ``exit_code`` is the program's own."""
    WALL_TIME = "wall_time"
    """The run took longer than ``Limits.wall_s`` (sleeping, blocking or looping forever)."""
    CPU_TIME = "cpu_time"
    """A process used more than ``Limits.cpu_s`` seconds of CPU (SIGXCPU/SIGKILL from the kernel)."""
    MEMORY = "memory"
    """An allocation failed or the cgroup's OOM killer fired (``Limits.memory_mb``)."""
    PROCESSES = "processes"
    """A fork or thread creation was refused (``Limits.processes``): fork bombs end here."""
    FILE_SIZE = "file_size"
    """A write past ``Limits.file_size_mb`` was refused (SIGXFSZ or ``EFBIG``)."""
    OUTPUT = "output"
    """stdout or stderr passed ``Limits.output_bytes``; the output is cut there and the run killed."""
    DISK = "disk"
    """The scratch dir grew past ``Limits.disk_mb`` (or a tmpfs filled up); the run was killed."""


class Isolation(enum.StrEnum):
    """How runs are isolated from the host."""

    BWRAP = "bwrap"
    """bubblewrap namespaces plus kernel limits (the default; refuses to run where bwrap cannot)."""
    NONE = "none"
    """Kernel limits and a scratch dir only: the program sees the host's files and network. Explicit
    opt-in for machines without bubblewrap; every result is marked ``isolated=False``."""


def default_isolation() -> Isolation:
    """``bwrap`` unless :data:`ISOLATION_ENV_VAR` says ``none`` (the explicit, machine-wide opt-in)."""
    value = os.environ.get(ISOLATION_ENV_VAR, "").strip().lower()
    return Isolation.NONE if value in ("none", "unisolated") else Isolation.BWRAP


class SandboxError(RuntimeError):
    """Base class of sandbox errors (raised for the caller's mistakes or the host's, never the program's)."""


class SandboxUnavailableError(SandboxError):
    """Isolation cannot work on this machine (bubblewrap missing, user namespaces disabled, ...).

    The message says what is missing and how to fix it, and how to opt into unisolated runs instead.
    """


class SandboxClosedError(SandboxError):
    """The sandbox was cleaned up; it cannot run anything any more."""


class SandboxCancelledError(SandboxError):
    """The caller cancelled a run (its ``cancel`` event was set): it was killed, or never started."""


class SandboxPathError(SandboxError, PermissionError):
    """A file path the host will not follow: a symlink, a read-only system path, or a non-file."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. Small, picklable, JSON-able; every field is enforced (see :class:`Limit`)."""

    wall_s: float = 10.0
    """Wall-clock seconds from start to the end of the whole process tree."""
    cpu_s: float = 10.0
    """CPU seconds per process (RLIMIT_CPU)."""
    memory_mb: int = 1024
    """Address space per process (RLIMIT_AS) and, with a cgroup, the whole tree's memory."""
    processes: int = 64
    """Processes and threads of the sandbox (RLIMIT_NPROC in its own user namespace; cgroup pids.max)."""
    file_size_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE)."""
    output_bytes: int = 1 << 20
    """Bytes kept of stdout and of stderr each; more ends the run with :attr:`Limit.OUTPUT`."""
    disk_mb: int = 256
    """Size of everything the sandbox wrote into its scratch dir (and of its ``/dev/shm``)."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)}")
        for name in ("memory_mb", "processes", "file_size_mb", "output_bytes", "disk_mb", "open_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        if self.processes < 2:
            raise ValueError("Limits.processes must be >= 2 (the sandbox's init and the program)")

    def with_time(self, seconds: float) -> Limits:
        """These limits with wall and CPU time both set to ``seconds``."""
        return replace(self, wall_s=float(seconds), cpu_s=float(seconds))

    def with_output(self, output_bytes: int) -> Limits:
        """These limits keeping ``output_bytes`` of each stream."""
        return replace(self, output_bytes=int(output_bytes))

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class SandboxConfig:
    """How sandboxes are made: default limits, isolation, and host-side knobs. Plain data; it pickles."""

    limits: Limits = field(default_factory=Limits)
    """Limits of each run unless the run passes its own."""
    isolation: Isolation = field(default_factory=default_isolation)
    """``bwrap`` (default) or the explicit unisolated opt-in, ``none``."""
    cgroups: bool = True
    """Put each run in its own cgroup (total memory, processes, kill) where a writable one exists."""
    python: str = "/usr/bin/python3"
    """The interpreter :meth:`Sandbox.run_python` uses (it must live under ``/usr`` when isolated)."""
    host_uid: int = 65534
    """When envsuite runs as root, bubblewrap runs as this unprivileged uid (default ``nobody``), so the
    sandbox's processes count against its own RLIMIT_NPROC and own nothing on the host."""
    scratch_parent: str | None = None
    """Directory the per-session scratch dirs are made in (default: the system temp dir)."""
    bwrap: str = "bwrap"
    """The bubblewrap executable: a name looked up in ``/usr/bin:/bin:/usr/local/bin``, or a path."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "isolation", Isolation(self.isolation))
        if isinstance(self.limits, dict):
            object.__setattr__(self, "limits", Limits(**self.limits))


@dataclass(frozen=True)
class RunResult:
    """What one run did. Field for field a superset of tinker-cookbook's ``SandboxResult``."""

    stdout: str
    """Standard output (UTF-8, undecodable bytes replaced), cut at ``Limits.output_bytes``."""
    stderr: str
    """Standard error, likewise."""
    exit_code: int
    """The program's exit status; ``128 + N`` when signal N killed it (as shells report it)."""
    limit: Limit = Limit.NONE
    """The limit that ended the run, if any."""
    wall_s: float = 0.0
    """Wall-clock seconds the run took."""
    cpu_s: float = 0.0
    """CPU seconds (user + system) of the whole process tree."""
    isolated: bool = True
    """False for runs under :attr:`Isolation.NONE` (the program could see the host)."""
    truncated: bool = False
    """True when stdout or stderr was cut at the output limit."""

    @property
    def ok(self) -> bool:
        """The program exited 0 and no limit was hit."""
        return self.exit_code == 0 and self.limit is Limit.NONE

    @property
    def metrics(self) -> dict[str, Any]:
        """Numbers about the run (tinker-cookbook's ``SandboxResult.metrics``)."""
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "limit": self.limit.value,
            "isolated": self.isolated,
            "truncated": self.truncated,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "limit": self.limit.value}


@dataclass(frozen=True)
class SandboxServerConfig:
    """``envsuite serve-sandbox``'s settings (the SandboxFusion API; its flags' defaults come from here)."""

    host: str = "127.0.0.1"
    port: int = 8080
    """SandboxFusion's port, so its clients' default ``http://localhost:8080/run_code`` finds the server."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Isolation and the limits a request gets besides its own timeouts (memory, processes, output)."""
    max_body_bytes: int = 64 << 20
    """Largest request accepted (code plus base64 files)."""
