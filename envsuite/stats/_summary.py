"""Across problems: the mean of per-problem estimates with a percentile-bootstrap confidence interval.

The unit of resampling is the problem (an episode seed with its ``n`` samples): each problem's
estimate is computed once from all its samples, then problems are resampled with replacement. Results
for different ``k``, ``n`` or settings are different quantities: :class:`SampledMetrics` records ``k``
and ``n`` so that callers (bench, leaderboard) never pool them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from envsuite.stats._estimators import maj_at_k, pass_at_k, pass_hat_k

DEFAULT_BOOTSTRAP = 2000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean over problems with a bootstrap confidence interval."""

    mean: float
    lo: float
    hi: float
    n: int
    """Problems averaged."""


def bootstrap_mean(
    values: Sequence[float],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """The mean of ``values`` and its percentile-bootstrap interval (seeded: the same every run)."""
    if not values:
        raise ValueError("cannot estimate a mean of no problems")
    if not 0.0 < confidence < 1.0 or n_boot < 1:
        raise ValueError(f"need 0 < confidence < 1 and n_boot >= 1, got {confidence}, {n_boot}")
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_boot, data.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(means, [tail, 100.0 - tail])
    return Interval(float(data.mean()), float(lo), float(hi), int(data.size))


@dataclass(frozen=True)
class ProblemSamples:
    """The ``n`` samples of one problem: whether each succeeded, and (for maj@k) each one's answer."""

    correct: tuple[bool, ...]
    answers: tuple[Hashable | None, ...] | None = None

    def __post_init__(self) -> None:
        if not self.correct:
            raise ValueError("a problem needs at least one sample")
        if self.answers is not None and len(self.answers) != len(self.correct):
            raise ValueError("answers and correct must have one entry per sample")

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def c(self) -> int:
        return sum(self.correct)


@dataclass(frozen=True)
class SampledMetrics:
    """pass@k, pass^k and (when answers are known) maj@k over problems, each with its interval."""

    k: int
    n_samples: int
    """Samples per problem (the same for every problem: estimates from different n are not pooled)."""
    pass_at_k: Interval
    pass_hat_k: Interval
    maj_at_k: Interval | None


def reported_ks(samples: int) -> tuple[int, ...]:
    """The k a run of ``samples`` plays per problem reports pass@k at: 1, the powers of two below
    ``samples``, and ``samples`` itself (``8 -> (1, 2, 4, 8)``, ``6 -> (1, 2, 4, 6)``)."""
    if samples < 1:
        raise ValueError(f"need at least one sample per problem, got {samples}")
    ks = {1, samples}
    power = 2
    while power < samples:
        ks.add(power)
        power *= 2
    return tuple(sorted(ks))


def sampled_metrics(
    problems: Sequence[ProblemSamples],
    k: int,
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> SampledMetrics:
    """Estimate pass@k, pass^k and maj@k (when every problem has answers) over ``problems``."""
    if not problems:
        raise ValueError("no problems to estimate over")
    sizes = {p.n for p in problems}
    if len(sizes) != 1:
        raise ValueError(f"every problem needs the same number of samples, got {sorted(sizes)}")

    def interval(values: list[float]) -> Interval:
        return bootstrap_mean(values, n_boot=n_boot, confidence=confidence, seed=seed)

    at = interval([pass_at_k(p.n, p.c, k) for p in problems])
    hat = interval([pass_hat_k(p.n, p.c, k) for p in problems])
    maj = None
    if all(p.answers is not None for p in problems):
        maj = interval([maj_at_k(p.answers or (), p.correct, k, seed=seed) for p in problems])
    return SampledMetrics(k=k, n_samples=sizes.pop(), pass_at_k=at, pass_hat_k=hat, maj_at_k=maj)
