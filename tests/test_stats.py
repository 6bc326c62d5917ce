"""pass@k, pass^k and maj@k against their closed forms, their unbiasedness, and the bootstrap intervals."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from envsuite.stats import (
    MAX_EXACT_SUBSETS,
    ProblemSamples,
    bootstrap_mean,
    maj_at_k,
    pass_at_k,
    pass_hat_k,
    sampled_metrics,
)


def _closed_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def _closed_pass_hat_k(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


def test_pass_at_k_matches_the_closed_form_on_fixed_cases() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 0, 5) == 0.0 and pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 3, 8) == 1.0  # fewer than k failures: some success is always drawn
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    for n in range(1, 25):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(_closed_pass_at_k(n, c, k)), abs=1e-12)
                assert pass_hat_k(n, c, k) == pytest.approx(float(_closed_pass_hat_k(n, c, k)), abs=1e-12)
    # Large n: the product form stays finite and exact where the binomials would be enormous.
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.77])
def test_the_estimators_are_unbiased(p: float) -> None:
    """E over c ~ Binomial(n, p) of the estimate equals the true value, exactly."""
    n = 12
    weights = [math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)]
    for k in (1, 3, 12):
        expected_at = sum(w * pass_at_k(n, c, k) for c, w in enumerate(weights))
        expected_hat = sum(w * pass_hat_k(n, c, k) for c, w in enumerate(weights))
        assert expected_at == pytest.approx(1 - (1 - p) ** k, abs=1e-12)
        assert expected_hat == pytest.approx(p**k, abs=1e-12)


def test_maj_at_k_on_fixed_cases() -> None:
    answers, correct = ("A", "A", "B"), (True, True, False)
    assert maj_at_k(answers, correct, 3) == 1.0
    assert maj_at_k(answers, correct, 1) == pytest.approx(2 / 3)  # maj@1 is the plain accuracy
    # k=2: {A,A} wins; {A,B} twice a tie, half right each time: (1 + 0.5 + 0.5) / 3.
    assert maj_at_k(answers, correct, 2) == pytest.approx(2 / 3)
    # A wrong majority beats a right minority; samples with no answer do not vote.
    assert maj_at_k(("7", "9", "9", None), (True, False, False, False), 4) == 0.0
    assert maj_at_k(("7", None, None), (True, False, False), 3) == 1.0
    assert maj_at_k((None, None), (False, False), 2) == 0.0
    with pytest.raises(ValueError, match="both correct and wrong"):
        maj_at_k(("A", "A"), (True, False), 2)


def test_maj_at_k_samples_subsets_when_there_are_too_many() -> None:
    n, k = 30, 15
    assert math.comb(n, k) > MAX_EXACT_SUBSETS
    answers = tuple("right" if i < 18 else f"wrong{i % 3}" for i in range(n))
    correct = tuple(a == "right" for a in answers)
    first = maj_at_k(answers, correct, k, seed=1)
    assert first == maj_at_k(answers, correct, k, seed=1)  # seeded: reproducible
    assert 0.9 < first <= 1.0  # 18 of 30 agree on the right answer; 12 wrong ones split three ways


def test_arguments_are_checked() -> None:
    for bad in [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    with pytest.raises(ValueError, match="same number of samples"):
        sampled_metrics([ProblemSamples((True,)), ProblemSamples((True, False))], k=1)
    with pytest.raises(ValueError):
        bootstrap_mean([])


def test_sampled_metrics_over_problems() -> None:
    problems = [
        ProblemSamples((True, False, False, True), ("4", "5", "6", "4")),
        ProblemSamples((False, False, False, False), ("1", "1", None, "2")),
        ProblemSamples((True, True, True, False), ("x", "x", "x", "y")),
    ]
    metrics = sampled_metrics(problems, k=2)
    assert (metrics.k, metrics.n_samples) == (2, 4)
    assert metrics.pass_at_k.mean == pytest.approx((5 / 6 + 0 + 1) / 3)
    assert metrics.pass_hat_k.mean == pytest.approx((1 / 6 + 0 + 3 / 6) / 3)
    assert metrics.maj_at_k is not None and metrics.pass_at_k.n == 3
    for interval in (metrics.pass_at_k, metrics.pass_hat_k, metrics.maj_at_k):
        assert interval.lo <= interval.mean <= interval.hi
    no_answers = sampled_metrics([ProblemSamples((True, False))], k=1)
    assert no_answers.maj_at_k is None and no_answers.pass_at_k.mean == 0.5


def test_bootstrap_intervals_cover_the_truth_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(0)
    p, covered, runs = 0.35, 0, 300
    for run in range(runs):
        sample = (rng.random(120) < p).astype(float).tolist()
        interval = bootstrap_mean(sample, n_boot=1000, seed=run)
        covered += interval.lo <= p <= interval.hi
    assert 0.91 <= covered / runs <= 0.985, covered / runs
