"""Background measurements and the process's exit.

An engine's first use on a machine builds and calibrates the native kernels (``kernels._first_use``)
and times the decode step's ways (``sampling._step_timing``) on daemon threads, so sampling starts at
once. A process may end while one of them is inside torch's C++ (a parallel region): a daemon thread
left there while the interpreter finalizes aborted the process ("terminate called without an active
exception", exit status -6; seen on a fresh AMD EPYC Zen 3 box by ``bench/first_use.py``, whose child
exits while the step timing runs). So such threads start through :func:`start_background`, their
loops call :func:`stop_point` between timed pieces of work (each well under a second), and at exit
:func:`stop_background` asks them to stop and waits for them; nothing half-measured is cached (the
next process measures again).
"""

from __future__ import annotations

import atexit
import threading

STOP_WAIT_S = 60.0
"""How long the exit waits for each background thread (a build's compiler run is not interrupted)."""

_stopping = threading.Event()
_threads: list[threading.Thread] = []
_lock = threading.Lock()


class BackgroundStopped(Exception):
    """Raised at a :func:`stop_point` once the process is exiting."""


def stop_point() -> None:
    """Where a background measurement may stop: raises :class:`BackgroundStopped` once the process exits."""
    if _stopping.is_set():
        raise BackgroundStopped("the process is exiting")


def start_background(thread: threading.Thread) -> None:
    """Start ``thread`` (a daemon) as a background measurement that the exit waits for."""
    with _lock:
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
    thread.start()


@atexit.register
def stop_background() -> None:
    """Ask every background measurement to stop and wait for each (at most :data:`STOP_WAIT_S`)."""
    _stopping.set()
    with _lock:
        threads = list(_threads)
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(timeout=STOP_WAIT_S)
