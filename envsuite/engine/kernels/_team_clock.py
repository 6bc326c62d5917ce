"""Where the decode step's team of threads spends its time: ``decode_layers``' phase clock, read back.

With ``ENVSUITE_DECODE_TEAM_CLOCK=1`` in the environment, every ``decode_layers`` call that runs as a team
(``_native_layers.cpp``) adds, per thread and phase, its time working in the phase and its time waiting at
the barrier that ends it; :func:`read_team_clock` reads the sums (and resets them). Without the variable
no clock is read. A diagnostic for benches (``bench/decode_team.py``): which phase of the step to speed
up, and how evenly a change shares out the work. Op-by-op calls count nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CLOCK_ENV = "ENVSUITE_DECODE_TEAM_CLOCK"

TEAM_PHASES = (
    "input norm",
    "q/k/v",
    "rotary",
    "attention",
    "o",
    "post norm",
    "gate/up",
    "silu",
    "down",
    "final norm",
    "lm head",
)
"""The team's phases in the order of the ``Phase`` enum in ``_native_layers.cpp`` (a layer's nine, then
the final norm and the LM head; the head's wait is the parallel region's end, not counted)."""


@dataclass(frozen=True)
class TeamClock:
    """The summed phase clock of ``calls`` team calls.

    Invariant: ``ns`` has shape (threads, len(TEAM_PHASES), 2), int64, [..., 0] working and [..., 1]
    waiting; threads is 0 when no team call was timed since the last reset.
    """

    ns: torch.Tensor
    calls: int

    @property
    def threads(self) -> int:
        return int(self.ns.shape[0])

    def working_us(self, thread: int) -> dict[str, float]:
        """Thread ``thread``'s time working in each phase, us per call."""
        return self._per_call(thread, 0)

    def waiting_us(self, thread: int) -> dict[str, float]:
        """Thread ``thread``'s time at the barrier that ends each phase, us per call."""
        return self._per_call(thread, 1)

    def _per_call(self, thread: int, column: int) -> dict[str, float]:
        calls = max(self.calls, 1)
        return {
            phase: float(self.ns[thread, i, column]) / 1000 / calls for i, phase in enumerate(TEAM_PHASES)
        }


def read_team_clock(reset: bool = True) -> TeamClock:
    """The phase clock summed since the last reset (needs the native kernels: ``native_kernels()``)."""
    ns, calls = torch.ops.envsuite.decode_layers_clock(reset)
    if ns.shape[0] and ns.shape[1] != len(TEAM_PHASES):
        raise RuntimeError(f"decode_layers_clock has {ns.shape[1]} phases, TEAM_PHASES {len(TEAM_PHASES)}")
    return TeamClock(ns=ns, calls=int(calls))
