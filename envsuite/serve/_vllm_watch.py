"""The watchdog that keeps ``envsuite serve --sampling-engine vllm``'s vLLM server up.

A thread of its own polls the server: a server started here is lost when its process has exited (a
kill, a crash) or when its health check has failed several times in a row (a hung engine); a user's
server (``--vllm-url``) when its health check fails. A request that could not reach the server wakes
the watchdog at once (:meth:`VllmWatchdog.suspect`) instead of waiting for the next poll.

While the server is lost, requests are answered at once with :class:`~envsuite.serve._errors.SamplerDown`
(a 503 whose ``Retry-After`` is the time a start took, less the time already spent) rather than
left hanging on a dead socket. ``recover`` brings the server back (a restart, or waiting for the
user's server) and loads every published adapter again before the server is marked up, so no request
samples a name the new server lacks.

Restarts are bounded: when a started server is lost more than ``max_restarts`` times within
``window_s`` seconds, something is wrong that restarting will not fix (a model that does not fit, a
broken venv): the watchdog stops, says so in the log, and the vLLM routes answer 503 without
``Retry-After`` until ``envsuite serve`` itself is restarted.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from envsuite.serve._errors import SamplerDown

logger = logging.getLogger("envsuite.serve")


class Phase(enum.Enum):
    UP = "up"
    DOWN = "down"
    """Lost, and being brought back."""
    FAILED = "failed"
    """Lost too often: no longer restarted."""


@dataclass(frozen=True)
class WatchSettings:
    poll_s: float = 1.0
    """How often the process is looked at (cheap: a ``waitpid``)."""
    health_every_s: float = 15.0
    health_failures: int = 3
    """Failed health checks in a row that make a live process count as lost (one is not enough: a
    2-core box under load can be slow to answer)."""
    max_restarts: int = 3
    window_s: float = 600.0


@dataclass(frozen=True)
class ServerProbe:
    """How the watchdog looks at the server and brings it back (the engine's side)."""

    exited: Callable[[], str | None]
    """Why the server's process is gone (None: running, or not ours to watch)."""
    healthy: Callable[[], bool]
    recover: Callable[[], None]
    """Restart it (or wait for the user's) and load the adapters again; raises when it cannot."""
    expected_start_s: Callable[[], float]
    """About how long bringing it back takes (the basis of ``Retry-After``)."""
    restartable: bool
    """True for a server started here (bounded restarts); False for the user's (waited for)."""


class VllmWatchdog:
    """Watches one vLLM server; :meth:`check_up` is what requests call before they sample."""

    def __init__(self, probe: ServerProbe, settings: WatchSettings | None = None) -> None:
        self.probe = probe
        self.settings = settings or WatchSettings()
        self.restarts = 0
        """Times the server was brought back."""
        self._phase = Phase.UP
        self._reason = ""
        self._down_since = 0.0
        self._losses: deque[float] = deque()
        self._changed = threading.Condition()
        self._wake = threading.Event()
        self._suspected = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="envsuite-serve-vllm-watch", daemon=True)

    @property
    def phase(self) -> Phase:
        with self._changed:
            return self._phase

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self._wake.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    # -- what requests see -------------------------------------------------------------------------

    def check_up(self) -> None:
        """Return when the server is up; else raise :class:`SamplerDown` at once (never wait)."""
        with self._changed:
            if self._phase is not Phase.UP:
                raise self._down_error()

    def wait_up(self, timeout_s: float) -> None:
        """Block (a worker thread, never the event loop) until the server is up; :class:`SamplerDown`
        when it is not within ``timeout_s`` or will not be."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._phase is Phase.DOWN and not self.stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 5.0))
            if self._phase is not Phase.UP:
                raise self._down_error()

    def suspect(self, reason: str) -> SamplerDown:
        """A request could not reach the server: look at it now. Returns the error to answer with."""
        logger.warning("vLLM request failed: %s", reason)
        with self._changed:
            self._suspected = True
            error = self._down_error(f"the vLLM server did not answer ({reason})")
        self._wake.set()
        return error

    def _down_error(self, reason: str | None = None) -> SamplerDown:
        if self._phase is Phase.FAILED:
            return SamplerDown(
                f"the vLLM server was lost {len(self._losses)} times in {self.settings.window_s:.0f} s and "
                f"is not restarted any more (last: {self._reason}); restart envsuite serve",
                None,
            )
        expected = self.probe.expected_start_s()
        elapsed = time.monotonic() - self._down_since if self._phase is Phase.DOWN else 0.0
        why = reason or f"the vLLM server was lost ({self._reason}) and is being brought back"
        return SamplerDown(f"{why}; retry shortly", max(1.0, expected - elapsed))

    # -- the watch ---------------------------------------------------------------------------------

    def _run(self) -> None:
        failed_checks, next_check = 0, time.monotonic() + self.settings.health_every_s
        while not self.stopping:
            self._wake.wait(self.settings.poll_s)
            self._wake.clear()
            if self.stopping:
                return
            with self._changed:
                suspected, self._suspected = self._suspected, False
            reason = self.probe.exited()
            if reason is None and (suspected or time.monotonic() >= next_check):
                next_check = time.monotonic() + self.settings.health_every_s
                failed_checks = 0 if self.probe.healthy() else failed_checks + 1
                # A request that just failed and a failed check together are enough.
                if failed_checks >= (1 if suspected else self.settings.health_failures):
                    reason = f"{failed_checks} failed health check(s)"
            if reason is not None:
                failed_checks = 0
                if not self._bring_back(reason):
                    return

    def _bring_back(self, reason: str) -> bool:
        """Recover the lost server; False once the watch gives up."""
        if self.stopping:  # serve is stopping the server itself
            return False
        now = time.monotonic()
        while self._losses and now - self._losses[0] > self.settings.window_s:
            self._losses.popleft()
        self._losses.append(now)
        limit = self.settings.max_restarts
        with self._changed:
            self._reason = reason
            if self.probe.restartable and len(self._losses) > limit:
                self._phase = Phase.FAILED
                self._changed.notify_all()
                logger.error(
                    "vLLM server lost (%s): %d losses in %.0f s, over the limit of %d; not restarting it "
                    "again: sampling on vLLM answers 503 until envsuite serve is restarted",
                    reason, len(self._losses), self.settings.window_s, limit,
                )  # fmt: skip
                return False
            if self._phase is Phase.UP:
                self._phase, self._down_since = Phase.DOWN, now
        action = f"restarting it ({len(self._losses)} of at most {limit} in {self.settings.window_s:.0f} s)"
        if not self.probe.restartable:
            action = "waiting for it to answer again"
        logger.warning("vLLM server lost (%s): %s", reason, action)
        try:
            self.probe.recover()
        except Exception as exc:  # still lost: the next poll counts another loss
            logger.error("vLLM server could not be brought back: %s: %s", type(exc).__name__, exc)
            return not self.stopping
        with self._changed:
            self._phase = Phase.UP
            self._changed.notify_all()
        self.restarts += 1
        logger.warning("vLLM server back after %.1f s", time.monotonic() - self._down_since)
        return True
