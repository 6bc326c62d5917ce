"""Per-problem estimators from ``n`` samples of which ``c`` succeeded: pass@k, pass^k, maj@k.

* **pass@k** (Chen et al. 2021, the Codex paper): the chance that at least one of ``k`` samples drawn
  without replacement from the ``n`` succeeds, ``1 - C(n-c, k) / C(n, k)``. Unbiased for
  ``1 - (1-p)^k``; computed as a product so large ``n`` neither overflows nor loses precision.
* **pass^k** (tau-bench's "all k succeed"): ``C(c, k) / C(n, k)``, unbiased for ``p^k``; the
  reliability counterpart of pass@k.
* **maj@k** (majority voting, cons@k): the chance that the most common answer among ``k`` samples
  drawn without replacement is a correct one. Samples without an answer do not vote; ties count as the
  share of tied answers that are correct (a fair tie-break, in expectation). Exact over every subset
  when there are few, else a seeded Monte Carlo average.

Every function takes plain numbers and returns a float in [0, 1]; bad arguments raise ``ValueError``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Hashable, Sequence

MAX_EXACT_SUBSETS = 20_000
"""maj@k enumerates every k-subset up to this many; beyond it, averages this many random subsets."""


def _check(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 samples and 0 <= c <= n successes, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..n (n={n} samples), got k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all of ``k`` samples succeed): ``C(c, k) / C(n, k)``."""
    _check(n, c, k)
    if c < k:
        return 0.0
    # C(c, k) / C(n, k) = prod_{j=0}^{k-1} (c - j) / (n - j)
    both = 1.0
    for j in range(k):
        both *= (c - j) / (n - j)
    return both


def _vote(answers: Sequence[Hashable | None], correct: Sequence[bool], subset: Sequence[int]) -> float:
    counts = Counter(answers[i] for i in subset if answers[i] is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    winners = [a for a, count in counts.items() if count == top]
    right = {answers[i] for i in subset if answers[i] is not None and correct[i]}
    return sum(a in right for a in winners) / len(winners)


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int, *, seed: int = 0) -> float:
    """maj@k of one problem: ``answers[i]`` is sample i's final answer (None: none), ``correct[i]``
    whether it is right. Equal answers must agree on correctness."""
    n = len(answers)
    if len(correct) != n:
        raise ValueError(f"{n} answers but {len(correct)} correctness flags")
    _check(n, sum(map(bool, correct)), k)
    verdict: dict[Hashable, bool] = {}
    for answer, ok in zip(answers, correct, strict=True):
        if answer is not None and verdict.setdefault(answer, bool(ok)) != bool(ok):
            raise ValueError(f"answer {answer!r} is marked both correct and wrong")
    if math.comb(n, k) <= MAX_EXACT_SUBSETS:
        subsets = list(itertools.combinations(range(n), k))
        return sum(_vote(answers, correct, s) for s in subsets) / len(subsets)
    rng = random.Random(seed)
    draws = [rng.sample(range(n), k) for _ in range(MAX_EXACT_SUBSETS)]
    return sum(_vote(answers, correct, s) for s in draws) / len(draws)
