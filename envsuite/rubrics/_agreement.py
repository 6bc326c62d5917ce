"""How far a judge can be trusted: agreement with labels, position bias, self-preference.

Agreement is accuracy and Cohen's kappa (agreement beyond what the two label rates give by chance) on
binary labels, each with a seeded percentile bootstrap over items. For accuracy a malformed verdict counts
as wrong (the judge gave no usable answer); kappa is over the decided items only (filling the undecided
ones with the wrong answer would read a silent judge as an adversarial one), and both rates are reported.
Position bias: each pairwise item is judged twice with the responses swapped; a consistent judge names
the same response both times; the flip rate is the share where its choice follows the position instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envsuite.stats import DEFAULT_BOOTSTRAP, Interval, bootstrap_mean


def cohen_kappa(predicted: Sequence[bool], labels: Sequence[bool]) -> float:
    """Cohen's kappa of two binary raters; 0.0 where chance agreement is 1 (both constant and equal)."""
    p = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    observed = float((p == y).mean())
    chance = float(p.mean() * y.mean() + (1 - p.mean()) * (1 - y.mean()))
    return 0.0 if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def _kappa_interval(predicted: Sequence[bool], labels: Sequence[bool], seed: int) -> Interval:
    rng = np.random.default_rng(seed)
    n = len(labels)
    p, y = np.asarray(predicted), np.asarray(labels)
    draws = [cohen_kappa(p[idx], y[idx]) for idx in rng.integers(0, n, size=(DEFAULT_BOOTSTRAP, n))]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return Interval(cohen_kappa(predicted, labels), float(lo), float(hi), n)


@dataclass(frozen=True)
class Agreement:
    accuracy: Interval
    kappa: Interval | None
    """Over decided items; None with fewer than two."""
    malformed_rate: float
    predicted_yes_rate: float


def agreement(predicted: Sequence[bool | None], labels: Sequence[bool], *, seed: int = 0) -> Agreement:
    """Agreement of verdicts (None: malformed, counted wrong) with labels."""
    if len(predicted) != len(labels) or not labels:
        raise ValueError("need as many verdicts as labels, at least one")
    hits = [float(p == y) for p, y in zip(predicted, labels, strict=True)]
    decided = [(p, y) for p, y in zip(predicted, labels, strict=True) if p is not None]
    kappa = None
    if len(decided) >= 2:
        kappa = _kappa_interval([p for p, _ in decided], [y for _, y in decided], seed)
    return Agreement(
        accuracy=bootstrap_mean(hits, seed=seed),
        kappa=kappa,
        malformed_rate=sum(p is None for p in predicted) / len(predicted),
        predicted_yes_rate=sum(p is True for p in predicted) / len(predicted),
    )


@dataclass(frozen=True)
class PositionBias:
    flip_rate: Interval
    """Share of items whose winner changed with the order (a tie or malformed either way counts as no flip)."""
    first_rate: float
    """Share of all verdicts naming whichever response was shown first."""
    pair_accuracy: Interval
    """Share of verdicts (both orders) naming the labelled better response."""
    malformed_rate: float
    """Share of verdicts naming no winner."""


def position_bias(
    forward: Sequence[str], swapped: Sequence[str], better: Sequence[str], *, seed: int = 0
) -> PositionBias:
    """From winners ("A", "B", "tie", "malformed") in shown order; ``better`` is the labelled A or B."""
    flips, firsts, right = [], [], []
    for f, s, b in zip(forward, swapped, better, strict=True):
        # Swapped order shows B first: the same underlying choice reads as the other letter.
        s_unswapped = {"A": "B", "B": "A"}.get(s, s)
        flips.append(float(f in ("A", "B") and s_unswapped in ("A", "B") and f != s_unswapped))
        firsts += [float(f == "A"), float(s == "A")]
        right += [float(f == b), float(s_unswapped == b)]
    return PositionBias(
        flip_rate=bootstrap_mean(flips, seed=seed),
        first_rate=sum(firsts) / len(firsts),
        pair_accuracy=bootstrap_mean(right, seed=seed),
        malformed_rate=sum(v == "malformed" for v in [*forward, *swapped]) / (2 * len(forward)),
    )
