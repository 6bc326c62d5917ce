"""Synchronous entry points that stay off a running event loop.

Inspect's synchronous API (``eval_set``, ``read_eval_log``, ``write_eval_log``...) runs its coroutine
with ``asyncio.run``; called on a thread whose event loop is running (a notebook, an async caller), it
first applies nest_asyncio and re-enters that loop. The loop's own ``_run_once`` had counted the handles
it was about to run; the nested run takes some of them, and when the outer one resumes it pops from an
empty queue (``IndexError: pop from an empty deque``), whenever other handles were ready in the same
batch: a race. :func:`run_outside_loop` is how the bench's synchronous entries avoid it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def run_outside_loop(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` here when this thread runs no event loop, else on a worker thread
    of its own (which runs none), waiting for it either way."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return function(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="envsuite-bench") as thread:
        return thread.submit(function, *args, **kwargs).result()
