"""Keep the heap from holding memory the process no longer uses (glibc), so RSS tracks what is live.

PyTorch's CPU tensors come from ``malloc``. glibc serves an allocation of at least its *mmap
threshold* with a fresh ``mmap`` (returned to the OS by ``free``) and anything smaller from its heap
arenas, which keep freed blocks for reuse. The threshold starts at 128 KiB but is dynamic: each free of
an mmapped block raises it to that block's size (up to 32 MiB), so after the first large tensor is
freed, every activation-sized tensor (a few MiB) lands in the arenas. A training pass allocates and
frees thousands of them in varying sizes and lifetimes; the arenas fragment and RSS grows far past the
live tensors. Measured on one SmolLM2 training pass of 1,752 tokens (8 tic-tac-toe games, recomputed
layers): 2.43 GB over the baseline with the dynamic threshold, 0.86 GB with a fixed 1 MiB one (4 MiB:
1.94 GB), in the same time.

So the local backend fixes the threshold (:func:`limit_heap_fragmentation`, which also switches the
dynamic adjustment off) when it builds a training or sampling client, and calls
:func:`release_free_memory` where a lot was just freed (after each training call, when the sampling
engine's running batch empties) to hand back what the arenas still hold.

That keeps RSS low but costs time: every large tensor is a fresh mapping whose pages the kernel must
fault in and zero. One LoRA step of 8 x 512 tokens (``bench/train_step.py``, idle machine): 37.2 s with
the 1 MiB threshold (112 s of system time over the run, 58 M page faults), 27.7 s with a fixed 32 MiB one
(26 s, 11 M) but a peak RSS of 4.8 GiB instead of 1.5. jemalloc, configured by :data:`JEMALLOC_CONF`,
gives both: 27.5 s a step at 1.55 GiB (12 s, 2 M). A malloc is chosen when a process starts, so the
``envsuite`` command restarts itself once with jemalloc preloaded where the library is installed
(:func:`reexec_under_jemalloc`; ``make install`` installs Debian's ``libjemalloc2``); the glibc
settings above are what a process gets otherwise (a library user's own script, the tests).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MMAP_THRESHOLD_BYTES = 1 << 20
"""Allocations of at least this size get their own mapping, returned to the OS when freed."""
_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""
_USER_SETTING = "MALLOC_MMAP_THRESHOLD_"
"""glibc's environment variable for the same setting: when a user set it, theirs wins."""


@functools.cache
def _libc() -> Any | None:
    """glibc's functions, or None where the C library is another (musl, macOS) or cannot be loaded."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if getattr(libc, "malloc_trim", None) is None or getattr(libc, "mallopt", None) is None:
        return None
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot (a no-op there)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


@functools.cache
def limit_heap_fragmentation() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` for this process (once; see the
    module docstring). False where it was not changed: not glibc, or ``MALLOC_MMAP_THRESHOLD_`` is set."""
    libc = _libc()
    if libc is None or _USER_SETTING in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


JEMALLOC_CONF = "oversize_threshold:0,background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0"
"""jemalloc's settings for envsuite: large allocations share the arenas (jemalloc otherwise gives
allocations of 8 MiB and more an arena that returns their pages at once: the fault-and-zero cost again),
and freed pages go back to the OS from a background thread after 5 s unused rather than at free."""
ALLOCATOR_SETTING = "ENVSUITE_ALLOCATOR"
"""``system`` keeps the ``envsuite`` command on the C library's malloc (no restart under jemalloc)."""
_TRIED = "ENVSUITE_JEMALLOC_TRIED"
"""Set on the restarted process, so that a preload the loader refused is never retried in a loop."""
_LIBRARY = "libjemalloc.so.2"


def jemalloc_path() -> str | None:
    """Where jemalloc's shared library is installed (Debian's ``libjemalloc2``), or None."""
    if ctypes.util.find_library("jemalloc") is None:
        return None
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        candidate = Path(directory) / _LIBRARY
        if candidate.is_file():
            return str(candidate)
    return None


def jemalloc_loaded() -> bool:
    """True when this process runs with jemalloc mapped (preloaded or linked)."""
    try:
        return "libjemalloc" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def reexec_under_jemalloc(argv: Sequence[str]) -> None:
    """Restart this process as ``argv`` with jemalloc preloaded (see the module docstring), or return.

    Returns without restarting where jemalloc is already loaded or not installed, on other systems
    than Linux, when ``ENVSUITE_ALLOCATOR=system`` is set, or after one restart. A user's
    ``MALLOC_CONF`` is kept. Call it first thing, before threads start or files open.
    """
    if sys.platform != "linux" or os.environ.get(ALLOCATOR_SETTING) == "system" or _TRIED in os.environ:
        return
    library = jemalloc_path()
    if library is None or jemalloc_loaded():
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(x for x in (library, env.get("LD_PRELOAD", "")) if x)
    env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    env[_TRIED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv], env)
