"""What a sandbox sees: its scratch root on the host, and the bubblewrap and prlimit command lines.

The scratch root is one host directory per session, bound as the sandbox's ``/`` (so ``/work``, ``/tmp``
and anything the program creates, ``/tests`` included, persist between runs of a session and vanish
with it). Over it, read-only: the host's ``/usr`` (and ``/bin``, ``/lib``... as the host has them,
symlinks or directories), a synthetic ``/etc`` (a passwd line for the sandbox user, ``localhost``), a
fresh ``/proc`` of its own pid namespace, a minimal ``/dev`` and a size-capped ``/dev/shm``. Nothing else
of the host is visible: not ``/etc/shadow``, not ``/root``, not the project, not the host's sockets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from envsuite.sandbox._types import SANDBOX_TMPDIR, SANDBOX_WORKDIR, Limits

SANDBOX_UID = 1000
"""The uid (and gid) programs run as inside the sandbox; it maps to the unprivileged host uid."""
SANDBOX_USER = "sandbox"
HOSTNAME = "sandbox"
SYSTEM_DIRS = ("usr",)
"""Host directories bound read-only as they are."""
_TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level names that are symlinks into /usr on merged-/usr systems and real dirs elsewhere."""
MOUNTED = ("usr", "proc", "dev", "etc", *_TOP_LEVEL_LINKS)
"""Top-level names the sandbox sees as mounts (not the scratch dir): the host reads them through the
sandbox itself, never directly."""

BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SANDBOX_WORKDIR,
    "TMPDIR": SANDBOX_TMPDIR,
    "USER": SANDBOX_USER,
    "LOGNAME": SANDBOX_USER,
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    # One BLAS/OpenMP thread: the process limit counts threads, and the cores are shared anyway.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The whole environment of a sandboxed program (plus what a run passes): nothing is inherited."""

HOST_ETC = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime")
"""Host ``/etc`` entries bound read-only (library lookup: Debian's BLAS behind numpy is found through
``/etc/alternatives``); nothing else of the host's ``/etc`` is visible."""

_ETC_FILES = {
    "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{SANDBOX_WORKDIR}:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
    "hosts": f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost\n",
    "hostname": f"{HOSTNAME}\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


def make_root(root: Path, owner: int | None) -> None:
    """Lay out a fresh scratch root at ``root`` (which must not exist), owned by ``owner`` if given.

    The root is private to its owner (0700); with ``owner`` set (envsuite runs as root and bwrap as
    ``owner``), its parent is opened for traversal only (0711) so that ``owner`` can reach it.
    """
    if owner is not None:
        root.parent.chmod(0o711)
    root.mkdir(mode=0o700)
    # /root: containers have it, and tools written for them run commands there (Harbor's graders).
    for name in ("work", "tmp", "root", "etc", "usr", "proc", "dev"):
        (root / name).mkdir(mode=0o1777 if name == "tmp" else 0o755)
    for name, text in _ETC_FILES.items():
        (root / "etc" / name).write_text(text, encoding="utf-8")
    for name in HOST_ETC:  # mount points
        host = Path("/etc") / name
        if host.is_dir():
            (root / "etc" / name).mkdir()
        elif host.exists():
            (root / "etc" / name).touch()
    for name in _TOP_LEVEL_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / name).mkdir(mode=0o755)
    if owner is not None:
        # The sandbox owns its root (it may mkdir /tests, as in a container); /etc stays the host's and
        # is mounted read-only anyway.
        for path in (root, root / "work", root / "tmp", root / "root"):
            os.chown(path, owner, owner)


def system_binds(root: Path) -> list[str]:
    """bwrap arguments binding the host's system dirs and the synthetic ``/etc`` read-only."""
    args: list[str] = []
    for name in (*SYSTEM_DIRS, *_TOP_LEVEL_LINKS):
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--ro-bind", str(root / "etc"), "/etc"]
    for name in HOST_ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def bwrap_argv(
    bwrap: str,
    root: Path,
    *,
    limits: Limits,
    env: Mapping[str, str],
    cwd: str,
    sync_fds: tuple[int, int] | None,
    ro_binds: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The bubblewrap command line (without the program): namespaces, mounts, env, cwd.

    ``ro_binds``: extra ``(host path, sandbox path)`` pairs bound read-only (a long-lived process's
    packages, :meth:`Sandbox.spawn`); the sandbox path must not be on a system mount.

    ``sync_fds`` is ``(info_fd, block_fd)``: bwrap reports its child's pid on the first and waits
    for a byte on the second before running the program (the runner moves both into the run's cgroup
    meanwhile, so every process of the program is born inside it).
    """
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop",
        "ALL",
        "--bind",
        str(root),
        "/",
        *system_binds(root),
        *(arg for host, inside in ro_binds for arg in ("--ro-bind", host, inside)),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(limits.disk_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--chdir",
        cwd,
        "--clearenv",
    ]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    if sync_fds is not None:
        argv += ["--info-fd", str(sync_fds[0]), "--block-fd", str(sync_fds[1])]
    return [*argv, "--"]


INIT_ARGV = ("/bin/sh", "-c", '"$@"; exit $?', "sandbox-init")
"""The sandbox's pid 1 (bwrap runs with ``--as-pid-1``): a shell that runs the program as its child and
exits with its status. The program keeps ordinary signal semantics (pid 1 ignores signals it has no
handler for), and since bwrap's monitor waits for this pid 1, the kernel's rusage of the run covers
the whole tree (bwrap's own init would exit before being waited for, losing the CPU time)."""


def prlimit_argv(prlimit: str, limits: Limits) -> list[str]:
    """``prlimit`` setting every rlimit, run inside the sandbox right before the program.

    Set inside, after bwrap made the user namespace, RLIMIT_NPROC counts this sandbox's processes
    only; set before, it would count every process of the host uid. CPU: SIGXCPU at the soft limit,
    SIGKILL a second later.
    """
    cpu = max(1, int(limits.cpu_s + 0.999))
    memory = limits.memory_mb << 20
    file_size = limits.file_size_mb << 20
    return [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={memory}:{memory}",
        f"--nproc={limits.processes}:{limits.processes}",
        f"--fsize={file_size}:{file_size}",
        f"--nofile={limits.open_files}:{limits.open_files}",
        "--core=0:0",
        "--",
    ]


def program_env(extra: Mapping[str, str] | None, *, root: Path | None) -> dict[str, str]:
    """:data:`BASE_ENV` plus ``extra``; unisolated runs (``root`` given) point HOME and TMPDIR into it."""
    env = dict(BASE_ENV)
    if root is not None:
        env |= {"HOME": str(root / "work"), "TMPDIR": str(root / "tmp")}
    for key, value in (extra or {}).items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"invalid environment variable {key!r}")
        env[key] = value
    return env


def check_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list of strings; refuses an empty command or NUL bytes (which exec cannot pass)."""
    args = [str(a) for a in argv]
    if not args or any("\0" in a for a in args):
        raise ValueError("a sandbox command must be a non-empty list of strings without NUL bytes")
    return args
