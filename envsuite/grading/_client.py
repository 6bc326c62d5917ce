"""The caller's side of the grading worker: start it lazily, bound every request, restart on failure.

math-verify bounds its own work with SIGALRM, which only works on a process's main thread, and sympy can
sit in C code that no signal interrupts. So math-verify runs in a persistent child process (on that
process's main thread, where its own timeouts work) and the caller enforces a hard wall-clock deadline
on each request: past it, the child is killed and the request answers ``TIMEOUT``. A new child starts
on the next request. Requests from any thread are serialized by a lock.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from envsuite.grading._result import GradeOutcome, GradeResult

if TYPE_CHECKING:
    from envsuite.grading._worker import GradeRequest

DEFAULT_TIMEOUT_S = 2.0
"""Default wall-clock bound on one math-verify comparison, enforced from outside the worker."""

DEFAULT_STARTUP_TIMEOUT_S = 120.0
"""How long a starting worker may take to import math-verify (not counted against requests)."""

START_ATTEMPTS = 3
"""Worker starts tried before a request gives up (a warm-up can time out on a loaded machine)."""

UNAVAILABLE_COOLDOWN_S = 30.0
"""After every start attempt failed, requests fail at once for this long before starting is tried again
(so a broken interpreter costs one round of attempts, not one per request)."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class GraderUnavailableError(RuntimeError):
    """The grading worker could not be started (math-verify missing, or the interpreter failed)."""


class _StartFailed(Exception):
    """One attempt at starting the worker failed (it is retried)."""


class _WorkerDied(Exception):
    """The worker exited or closed its pipe mid-request."""


class Grader:
    """A persistent math-verify worker process, shared by all threads of this process.

    ``verify`` may be called from any thread (including ``asyncio.to_thread`` workers and the main
    thread). A forked child process gets its own worker instead of sharing the parent's pipes.
    """

    def __init__(self, *, startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> None:
        self.startup_timeout_s = startup_timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._owner_pid = os.getpid()
        self._unavailable_until = 0.0
        self._last_start_error = ""
        self.restarts = 0
        """How many times a worker was killed or lost and had to be replaced."""
        self.start_failures = 0
        """How many worker starts failed (each was retried, up to :data:`START_ATTEMPTS` per request)."""

    # -- public -----------------------------------------------------------------------------------

    def verify(self, reference: str, prediction: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GradeResult:
        """Compare with math-verify in the worker, waiting at most ``timeout_s`` for the verdict.

        No screening happens here (see :func:`~envsuite.grading.grade_answer`). Raises
        :class:`GraderUnavailableError` only when no worker can be started: :data:`START_ATTEMPTS`
        starts in a row failed (then, for :data:`UNAVAILABLE_COOLDOWN_S`, requests raise at once).
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self._forget_parent_worker()
        with self._lock:
            proc = self._ensure_started()
            self._next_id += 1
            request: GradeRequest = {
                "id": self._next_id,
                "reference": reference,
                "prediction": prediction,
                # math-verify's own alarm (whole seconds) fires first where it can; the deadline is the backstop.
                "timeout": max(1, math.floor(timeout_s / 2)),
            }
            try:
                self._send(proc, request)
                reply = self._receive(proc, self._next_id, time.monotonic() + timeout_s)
            except TimeoutError:
                self._replace_worker()
                return GradeResult(
                    GradeOutcome.TIMEOUT, f"no verdict within {timeout_s:g} s; worker restarted"
                )
            except _WorkerDied as exc:
                self._replace_worker()
                return GradeResult(GradeOutcome.ERROR, f"grading worker died ({exc}); it will be restarted")
        return GradeResult(GradeOutcome(str(reply["outcome"])), str(reply.get("detail", "")))

    @property
    def worker_pid(self) -> int | None:
        """Process id of the running worker, or None before the first request / after close."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def close(self) -> None:
        """Stop the worker (a later request starts a new one, without waiting out a cool-down)."""
        with self._lock:
            self._kill()
            self._unavailable_until = 0.0

    # -- process management --------------------------------------------------------------------

    def _forget_parent_worker(self) -> None:
        if os.getpid() != self._owner_pid:
            # After a fork the pipes belong to the parent's worker; talking to it would cross replies.
            self._owner_pid = os.getpid()
            self._lock = threading.Lock()
            self._proc = None
            self._buffer = b""

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            self._kill()
            self.restarts += 1
        if time.monotonic() < self._unavailable_until:
            raise GraderUnavailableError(
                f"the math-verify grading worker could not be started ({self._last_start_error}); "
                "not retrying for a while"
            )
        for _ in range(START_ATTEMPTS):
            try:
                return self._start_once()
            except _StartFailed as exc:
                self.start_failures += 1
                self._last_start_error = str(exc)
        self._unavailable_until = time.monotonic() + UNAVAILABLE_COOLDOWN_S
        raise GraderUnavailableError(
            f"the math-verify grading worker did not start in {START_ATTEMPTS} attempts (last: "
            f"{self._last_start_error}); check that math-verify is installed in this interpreter (its "
            "error, if any, is on stderr above)"
        )

    def _start_once(self) -> subprocess.Popen[bytes]:
        """One worker start: spawn it and wait for its ``ready`` line (after its warm-up grade)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "envsuite.grading._worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env=env,
            )
        except OSError as exc:
            raise _StartFailed(f"could not spawn it: {exc}") from exc
        self._proc, self._buffer = proc, b""
        try:
            self._receive(proc, None, time.monotonic() + self.startup_timeout_s)
        except TimeoutError:
            self._kill()
            raise _StartFailed(f"no ready line within {self.startup_timeout_s:g} s") from None
        except _WorkerDied as exc:
            self._kill()
            raise _StartFailed(f"{exc} before it was ready") from None
        return proc

    def _replace_worker(self) -> None:
        self._kill()
        self.restarts += 1

    def _kill(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    # -- wire protocol -------------------------------------------------------------------------

    @staticmethod
    def _send(proc: subprocess.Popen[bytes], request: GradeRequest) -> None:
        stdin = proc.stdin
        if stdin is None:
            raise _WorkerDied("no stdin")
        try:
            stdin.write((json.dumps(request) + "\n").encode("utf-8"))
            stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _WorkerDied(f"cannot write to it: {exc}") from exc

    def _receive(
        self, proc: subprocess.Popen[bytes], request_id: int | None, deadline: float
    ) -> dict[str, object]:
        """The next reply line (the ``ready`` line when ``request_id`` is None), waiting until ``deadline``."""
        stdout = proc.stdout
        if stdout is None:
            raise _WorkerDied("no stdout")
        while True:
            line, sep, rest = self._buffer.partition(b"\n")
            if sep:
                self._buffer = rest
                reply = _decode(line)
                if reply is not None and (request_id is None or reply.get("id") == request_id):
                    return reply
                continue
            self._buffer += _read_some(stdout, deadline)


def _read_some(stdout: IO[bytes], deadline: float) -> bytes:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline passed")
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        if not selector.select(remaining):
            raise TimeoutError("deadline passed")
    chunk = os.read(stdout.fileno(), 65536)
    if not chunk:
        raise _WorkerDied("it exited")
    return chunk


def _decode(line: bytes) -> dict[str, object] | None:
    try:
        reply = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return reply if isinstance(reply, dict) else None
