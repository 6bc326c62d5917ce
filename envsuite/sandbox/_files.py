"""Reading and writing a sandbox's files from the host without being tricked by what the program made.

The scratch root belongs to the program, so every name in it is hostile: a symlink to ``/etc/shadow``,
``../..`` chains, a FIFO that blocks the reader. Paths are resolved lexically against the sandbox's
``/`` (``..`` cannot climb above it), then opened one component at a time from a descriptor of the root
with ``O_NOFOLLOW``: a symlink anywhere in the path is refused (:class:`SandboxPathError`), never
followed, and only regular files are read. Paths under the read-only mounts (``/usr``, ``/proc``,
``/dev``, ``/etc``) are not on the host side at all: the caller reads them through the sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from pathlib import Path

from envsuite.sandbox._layout import MOUNTED
from envsuite.sandbox._types import SANDBOX_WORKDIR, SandboxPathError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def sandbox_path(path: str, cwd: str = SANDBOX_WORKDIR) -> str:
    """``path`` as an absolute, normalized path inside the sandbox (relative ones start at ``cwd``)."""
    if "\0" in path:
        raise SandboxPathError(f"invalid path {path!r}")
    joined = posixpath.join(cwd, path)
    normal = posixpath.normpath("/" + joined.lstrip("/"))
    # normpath keeps a leading "//"; collapse it so the first component is read right.
    return "/" + normal.lstrip("/")


def on_mount(path: str) -> bool:
    """Whether an absolute sandbox path lies on a read-only mount rather than in the scratch root."""
    parts = path.strip("/").split("/")
    return bool(parts[0]) and parts[0] in MOUNTED


def _parts(path: str) -> list[str]:
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts:
        raise SandboxPathError(f"{path!r} is a directory, not a file")
    return parts


def _walk(root: Path, parts: list[str], *, create: bool, owner: int | None) -> int:
    """A descriptor of the directory holding ``parts[-1]``, opened without following any link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(name, owner, owner, dir_fd=fd, follow_symlinks=False)
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise _explain(exc, "/" + "/".join(parts)) from None
    return fd


class LinkInPathError(SandboxPathError):
    """The path goes through a symlink (which the host does not follow; the sandbox may, in its view)."""


def _explain(exc: OSError, path: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return LinkInPathError(f"{path}: the path goes through a symlink or a non-directory; not followed")
    return exc


def read_bytes(root: Path, path: str, max_bytes: int | None = None) -> bytes:
    """The contents of regular file ``path`` (absolute, normalized) of the scratch root."""
    parts = _parts(path)
    dir_fd = _walk(root, parts, create=False, owner=None)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise _explain(exc, path) from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(mode):
            raise SandboxPathError(f"{path} is not a regular file; not read")
        os.set_blocking(fh.fileno(), True)
        return fh.read() if max_bytes is None else fh.read(max_bytes)


def write_bytes(root: Path, path: str, data: bytes, *, executable: bool, owner: int | None) -> None:
    """Create or replace regular file ``path`` of the scratch root, making parent directories."""
    if on_mount(path):
        raise SandboxPathError(f"{path} is on a read-only system mount")
    parts = _parts(path)
    dir_fd = _walk(root, parts, create=True, owner=owner)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, 0o755 if executable else 0o644, dir_fd=dir_fd)
    except OSError as exc:
        raise _explain(exc, path) from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "wb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise SandboxPathError(f"{path} is not a regular file; not written")
        os.set_blocking(fh.fileno(), True)
        fh.write(data)
        os.fchmod(fh.fileno(), 0o755 if executable else 0o644)
        if owner is not None:
            with contextlib.suppress(OSError):
                os.fchown(fh.fileno(), owner, owner)


def remove_file(root: Path, path: str) -> None:
    """Remove regular file ``path`` of the scratch root if it is there (links are unlinked, not followed)."""
    parts = _parts(path)
    try:
        dir_fd = _walk(root, parts, create=False, owner=None)
    except (FileNotFoundError, SandboxPathError):
        return
    try:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(parts[-1], dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
