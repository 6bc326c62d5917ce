"""Per-game random state for libraries that use Python's global ``random`` (textarena does).

textarena's ``reset(seed=)`` calls ``random.seed`` and its games draw from the module-level generator,
so two games in one process would share and disturb one stream. Each :class:`IsolatedRandom` keeps its
own generator state and swaps it into the global module only for the duration of a call into the
library, under one process-wide lock, restoring the caller's state afterwards. A seed therefore fixes
an episode however many games run at once, and callers never see their global state change.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeAlias, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

NumpyState: TypeAlias = dict[str, object]
"""``numpy.random.get_state(legacy=False)``: the bit generator's name and its state, only ever handed
back to ``set_state``."""

_GLOBAL_STATE_LOCK = threading.RLock()
"""Held while any game's state is swapped into the global generators (RLock: calls may nest)."""


class IsolatedRandom:
    """A private copy of the global ``random`` (and optionally ``numpy.random``) state."""

    def __init__(self, seed: int, *, numpy: bool = False) -> None:
        self._state = random.Random(seed).getstate()
        self._np_state: NumpyState | None = None
        if numpy:
            import numpy as np

            self._np_state = np.random.RandomState(seed % 2**32).get_state(legacy=False)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run the body with this object's state as the global random state."""
        with _GLOBAL_STATE_LOCK:
            saved = random.getstate()
            random.setstate(self._state)
            np_saved = self._swap_numpy_in()
            try:
                yield
            finally:
                self._state = random.getstate()
                random.setstate(saved)
                self._swap_numpy_out(np_saved)

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` with this object's state as the global random state.

        Same effect as ``with self.active(): fn(...)``, without the generator overhead on hot paths.
        """
        with _GLOBAL_STATE_LOCK:
            saved = random.getstate()
            random.setstate(self._state)
            np_saved = self._swap_numpy_in()
            try:
                return fn(*args, **kwargs)
            finally:
                self._state = random.getstate()
                random.setstate(saved)
                self._swap_numpy_out(np_saved)

    def _swap_numpy_in(self) -> NumpyState | None:
        if self._np_state is None:
            return None
        import numpy as np

        saved: NumpyState = np.random.get_state(legacy=False)
        np.random.set_state(self._np_state)
        return saved

    def _swap_numpy_out(self, saved: NumpyState | None) -> None:
        if saved is None:
            return
        import numpy as np

        self._np_state = np.random.get_state(legacy=False)
        np.random.set_state(saved)
