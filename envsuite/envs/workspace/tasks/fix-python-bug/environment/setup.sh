#!/bin/bash
# Lays out /app (what a Dockerfile's COPY would do in Harbor).
set -euo pipefail
cd /app
cat > stats.py <<'PY'
"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list."""
    return sum(values) / len(values)


def variance(values):
    """The population variance of a non-empty list."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def percentile(values, p):
    """The value at percentile p (0-100) of a non-empty list: nearest rank, sorted ascending."""
    ordered = sorted(values)
    rank = int(p / 100 * len(ordered))
    return ordered[rank]
PY
cat > test_stats.py <<'PY'
from stats import mean, percentile, variance

assert mean([1, 2, 3]) == 2
assert percentile([5, 1, 3], 0) == 1
assert variance([1, 1, 1]) == 0
print("ok")
PY
