"""Group-centred advantages (GRPO), and which groups carry no learning signal.

A member's advantage is its return minus the mean return of its group; all members of a group played
the same episode, so the mean is a per-problem baseline. Dividing by the group's std (the original
GRPO) is optional and off by default: as Dr. GRPO argues, it over-weights problems that are nearly
always solved or nearly always failed. A group whose returns are all equal has all-zero advantages
and is dropped before training (and counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_EQUAL_TOL = 1e-9
_STD_FLOOR = 1e-6


@dataclass(frozen=True)
class GroupAdvantages:
    """Per-member advantages of one group, or why it gives no signal."""

    advantages_G: list[float]
    constant: bool
    """True when every member got the same return (all advantages are 0; the group is dropped)."""


def compute_advantages(rewards_G: list[float], *, scale_by_std: bool = False) -> GroupAdvantages:
    """Centre ``rewards_G`` on their mean (optionally divide by their std)."""
    if not rewards_G:
        return GroupAdvantages([], True)
    if any(not math.isfinite(r) for r in rewards_G):
        raise ValueError(f"non-finite reward in group: {rewards_G}")
    mean = sum(rewards_G) / len(rewards_G)
    centred_G = [r - mean for r in rewards_G]
    if max(abs(c) for c in centred_G) <= _EQUAL_TOL:
        return GroupAdvantages([0.0] * len(rewards_G), True)
    if scale_by_std:
        std = math.sqrt(sum(c * c for c in centred_G) / len(centred_G))
        centred_G = [c / max(std, _STD_FLOOR) for c in centred_G]
    return GroupAdvantages(centred_G, False)
