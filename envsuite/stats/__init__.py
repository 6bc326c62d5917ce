"""Multi-sample statistics: unbiased pass@k, pass^k and maj@k, with bootstrap confidence intervals.

In the core so that ``envsuite.evals`` (``envsuite bench --samples K``) and ``envsuite.leaderboard``
compute them one way. Per problem (:mod:`envsuite.stats._estimators`): ``pass_at_k(n, c, k)`` is the
Codex paper's unbiased estimator, ``pass_hat_k`` its all-k-succeed counterpart, ``maj_at_k`` majority
voting. Across problems (:func:`sampled_metrics`): means with percentile-bootstrap intervals, the problem
as the unit of resampling, ``k`` and ``n`` recorded so that different settings are never pooled::

    from envsuite.stats import ProblemSamples, sampled_metrics

    problems = [ProblemSamples((True, False, False, True)), ProblemSamples((False,) * 4)]
    sampled_metrics(problems, k=2).pass_at_k     # Interval(mean=0.4167, lo=..., hi=..., n=2)
"""

from __future__ import annotations

from envsuite.stats._estimators import MAX_EXACT_SUBSETS, maj_at_k, pass_at_k, pass_hat_k
from envsuite.stats._summary import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    Interval,
    ProblemSamples,
    SampledMetrics,
    bootstrap_mean,
    reported_ks,
    sampled_metrics,
)

__all__ = [
    # per problem
    "pass_at_k",
    "pass_hat_k",
    "maj_at_k",
    "MAX_EXACT_SUBSETS",
    # across problems
    "Interval",
    "ProblemSamples",
    "SampledMetrics",
    "bootstrap_mean",
    "sampled_metrics",
    "reported_ks",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CONFIDENCE",
]
