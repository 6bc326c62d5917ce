"""A sandbox session: one scratch root, any number of runs in it, its files, and tinker-cookbook's protocol.

:class:`Sandbox` keeps its scratch root between runs (files written by one run are there for the next,
as in a container), and :meth:`Sandbox.close` removes it. It structurally implements
tinker-cookbook 0.5.8's ``SandboxInterface`` (``sandbox_id``, ``send_heartbeat``, ``run_command``,
``read_file``, ``write_file``, ``cleanup``; results carry ``stdout``/``stderr``/``exit_code``/``metrics``),
so cookbook code that takes a sandbox (its MBPP and LiveCodeBench benchmarks, Harbor's tools) takes
this one. The sync methods (:meth:`run`, :meth:`run_python`, :meth:`read_bytes`, :meth:`write_bytes`)
are the native API; the async ones run them in a thread.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from envsuite.sandbox import _files
from envsuite.sandbox._layout import check_argv, make_root
from envsuite.sandbox._process import SandboxProcess, spawn
from envsuite.sandbox._runner import execute
from envsuite.sandbox._support import SandboxSupport, sandbox_support
from envsuite.sandbox._types import (
    SANDBOX_WORKDIR,
    Isolation,
    Limit,
    Limits,
    RunResult,
    SandboxClosedError,
    SandboxConfig,
    SandboxPathError,
)

COOKBOOK_OUTPUT_BYTES = 128 * 1024
"""tinker-cookbook's default output cap for ``run_command`` (its Modal sandbox's)."""
_MAX_INSIDE_READ = 64 << 20
"""Largest file :meth:`Sandbox.read_bytes` reads through the sandbox (mounts, links) without ``max_bytes``."""


class Sandbox:
    """One isolated session. Make it, run programs, read and write its files, close it.

    Raises :class:`~envsuite.sandbox.SandboxUnavailableError` at construction where bubblewrap cannot
    run (unless the config opts into :attr:`Isolation.NONE`). Thread-safe: runs may overlap.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.support: SandboxSupport = sandbox_support(self.config)
        self._id = uuid.uuid4().hex
        self._tmp = tempfile.mkdtemp(prefix="envsuite-sandbox-", dir=self.config.scratch_parent)
        self.root = Path(self._tmp) / "root"
        """The scratch root on the host (the sandbox's ``/``)."""
        make_root(self.root, self.support.run_as)
        self._closed = False
        self._lock = threading.Lock()
        self._processes: list[SandboxProcess] = []

    # -- identity ---------------------------------------------------------------------------------

    @property
    def sandbox_id(self) -> str:
        """A unique id for this session (tinker-cookbook's ``SandboxInterface.sandbox_id``)."""
        return self._id

    @property
    def isolated(self) -> bool:
        return self.support.isolation is Isolation.BWRAP

    # -- running ----------------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | bytes | None = None,
        cwd: str = SANDBOX_WORKDIR,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        """Run ``argv`` (found on the sandbox's ``PATH``) and return what happened; never raises for it.

        ``cancel``: set it from another thread to kill the run (its caller left); the run then raises
        :class:`~envsuite.sandbox.SandboxCancelledError`."""
        self._check_open()
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        where = _files.sandbox_path(cwd)
        return execute(
            self.support,
            self.root,
            check_argv(argv),
            limits=limits or self.config.limits,
            stdin=data,
            cwd=where,
            env=env,
            cancel=cancel,
        )

    def run_shell(
        self,
        command: str,
        *,
        stdin: str | bytes | None = None,
        cwd: str = SANDBOX_WORKDIR,
        limits: Limits | None = None,
    ) -> RunResult:
        """Run a bash command line (``bash -c``)."""
        return self.run(["bash", "-c", command], stdin=stdin, cwd=cwd, limits=limits)

    def run_python(
        self,
        code: str,
        *,
        stdin: str | bytes | None = None,
        cwd: str = SANDBOX_WORKDIR,
        limits: Limits | None = None,
        args: Sequence[str] = (),
        cancel: threading.Event | None = None,
    ) -> RunResult:
        """Run Python source ``code`` as a script in ``cwd`` (``cancel`` as for :meth:`run`).

        The script is a hidden file in ``cwd`` (so ``cwd`` is first on ``sys.path``, as for SandboxFusion's
        scripts and ``python main.py``), removed after the run.
        """
        self._check_open()
        name = f".envsuite-main-{uuid.uuid4().hex[:12]}.py"
        path = _files.sandbox_path(name, _files.sandbox_path(cwd))
        self.write_bytes(path, code.encode("utf-8", "surrogatepass"))
        try:
            # By name, relative to cwd: the same file inside bwrap and for unisolated runs.
            argv = [self.config.python, name, *args]
            return self.run(argv, stdin=stdin, cwd=cwd, limits=limits, cancel=cancel)
        finally:
            if not self._closed:
                _files.remove_file(self.root, path)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str = SANDBOX_WORKDIR,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        ro_binds: Mapping[str, str] | None = None,
    ) -> SandboxProcess:
        """Start a long-lived program with stdin/stdout pipes (a stdio server); see
        :mod:`envsuite.sandbox._process` for what it sees and what limits it.

        ``ro_binds``: host path -> absolute sandbox path, bound read-only (e.g. a venv's site-packages
        so a Python server package runs inside). :meth:`close` kills it with its tree before the root
        goes. Raises :class:`~envsuite.sandbox.SandboxError` where isolation is off."""
        self._check_open()
        binds: list[tuple[str, str]] = []
        for host, inside in (ro_binds or {}).items():
            where = _files.sandbox_path(inside)
            if where == "/" or _files.on_mount(where):
                raise SandboxPathError(f"{inside}: a bind may not cover a system mount")
            binds.append((str(Path(host).resolve()), where))
        process = spawn(
            self.support,
            self.root,
            check_argv(argv),
            limits=limits or self.config.limits,
            cwd=_files.sandbox_path(cwd),
            env=dict(env or {}),
            ro_binds=binds,
            stderr_path=Path(self._tmp) / f"spawn-{uuid.uuid4().hex[:12]}.stderr",
        )
        with self._lock:
            self._processes.append(process)
        return process

    # -- files --------------------------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes, *, executable: bool = False) -> None:
        """Write a file into the sandbox (relative paths start at ``/work``); parents are made.

        Refuses paths through symlinks and on the read-only mounts (:class:`SandboxPathError`).
        """
        self._check_open()
        where = _files.sandbox_path(path)
        _files.write_bytes(self.root, where, data, executable=executable, owner=self.support.run_as)

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a file of the sandbox. Files on the system mounts, or reached through links, are read
        from inside the sandbox (it sees only its own view); raises ``FileNotFoundError`` if absent."""
        self._check_open()
        where = _files.sandbox_path(path)
        if not _files.on_mount(where):
            try:
                return _files.read_bytes(self.root, where, max_bytes)
            except _files.LinkInPathError:
                pass  # a link: let the sandbox follow it in its own view
        return self._read_inside(where, max_bytes)

    def _read_inside(self, path: str, max_bytes: int | None) -> bytes:
        """Read ``path`` through the sandbox's own view, base64-encoded on the way out (bytes exact)."""
        limit = max_bytes if max_bytes is not None else _MAX_INSIDE_READ
        script = 'head -c "$1" -- "$2" | base64 -w0'
        limits = self.config.limits
        done = self.run(
            ["/bin/sh", "-c", script, "read", str(limit + 1 if max_bytes is None else limit), path],
            limits=limits.with_output(max(limits.output_bytes, 4 * (limit + 3) // 3 + 4)),
        )
        if done.stderr.strip() or done.exit_code != 0 or done.limit is not Limit.NONE:
            if "No such file" in done.stderr:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if "Is a directory" in done.stderr:
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            raise PermissionError(f"{path}: {done.stderr.strip() or done.limit.value}")
        data = base64.b64decode(done.stdout)
        if max_bytes is None and len(data) > limit:
            raise SandboxPathError(f"{path} is larger than {limit} bytes; pass max_bytes")
        return data

    # -- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the scratch root. Idempotent; later runs raise :class:`SandboxClosedError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            processes, self._processes = self._processes, []
        for process in processes:
            process.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self._id} was cleaned up")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- async: the native API in a thread, and tinker-cookbook's SandboxInterface --------------------

    async def run_async(
        self,
        argv: Sequence[str],
        *,
        stdin: str | bytes | None = None,
        cwd: str = SANDBOX_WORKDIR,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """:meth:`run` without blocking the event loop."""
        return await asyncio.to_thread(self.run, argv, stdin=stdin, cwd=cwd, env=env, limits=limits)

    async def run_python_async(
        self, code: str, *, stdin: str | bytes | None = None, limits: Limits | None = None
    ) -> RunResult:
        """:meth:`run_python` without blocking the event loop."""
        return await asyncio.to_thread(self.run_python, code, stdin=stdin, limits=limits)

    async def send_heartbeat(self, timeout: int = 30) -> None:
        """Nothing to keep alive locally; raises :class:`SandboxClosedError` once cleaned up."""
        self._check_open()

    async def run_command(
        self,
        command: str,
        workdir: str | None = None,
        timeout: int = 60,
        max_output_bytes: int | None = None,
    ) -> RunResult:
        """tinker-cookbook's ``run_command``: a bash command line, ``timeout`` seconds of wall and CPU."""
        limits = self.config.limits.with_time(timeout)
        cap = max_output_bytes if max_output_bytes is not None else COOKBOOK_OUTPUT_BYTES
        limits = limits.with_output(max(1, cap))
        return await self.run_async(["bash", "-c", command], cwd=workdir or SANDBOX_WORKDIR, limits=limits)

    async def read_file(self, path: str, max_bytes: int | None = None, timeout: int = 60) -> RunResult:
        """tinker-cookbook's ``read_file``: the content as ``stdout``, exit code 1 and a reason if unreadable."""
        try:
            data = await asyncio.to_thread(self.read_bytes, path, max_bytes)
        except (OSError, SandboxPathError) as exc:
            return RunResult(stdout="", stderr=f"{path}: {exc}", exit_code=1, isolated=self.isolated)
        return RunResult(
            stdout=data.decode("utf-8", "replace"), stderr="", exit_code=0, isolated=self.isolated
        )

    async def write_file(
        self, path: str, content: str | bytes, executable: bool = False, timeout: int = 60
    ) -> RunResult:
        """tinker-cookbook's ``write_file``: exit code 0 when written, 1 and a reason when refused."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        try:
            await asyncio.to_thread(self.write_bytes, path, data, executable=executable)
        except (OSError, SandboxPathError) as exc:
            return RunResult(stdout="", stderr=f"{path}: {exc}", exit_code=1, isolated=self.isolated)
        return RunResult(stdout="", stderr="", exit_code=0, isolated=self.isolated)

    async def cleanup(self) -> None:
        """tinker-cookbook's ``cleanup``: :meth:`close`."""
        await asyncio.to_thread(self.close)


def run_python(
    code: str,
    *,
    stdin: str | bytes | None = None,
    limits: Limits | None = None,
    config: SandboxConfig | None = None,
) -> RunResult:
    """Run ``code`` once in a fresh sandbox that is removed afterwards."""
    with Sandbox(config) as box:
        return box.run_python(code, stdin=stdin, limits=limits)


async def run_python_async(
    code: str,
    *,
    stdin: str | bytes | None = None,
    limits: Limits | None = None,
    config: SandboxConfig | None = None,
) -> RunResult:
    """:func:`run_python` without blocking the event loop."""
    return await asyncio.to_thread(run_python, code, stdin=stdin, limits=limits, config=config)
