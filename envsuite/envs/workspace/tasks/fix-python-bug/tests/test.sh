#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Hidden checks of /app/stats.py (stdlib first on the path: a module named like a stdlib one in /app
cannot stand in for it)."""

import math
import sys

sys.path.append("/app")
import stats


def close(a, b):
    return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


assert close(stats.variance([2, 4, 4, 4, 5, 5, 7, 9]), 4.0)
assert close(stats.variance([1.5, 2.5]), 0.25)
assert close(stats.variance([7]), 0.0)
assert close(stats.mean([1, 2, 3, 4]), 2.5)
assert stats.percentile([3, 1, 2], 100) == 3
assert stats.percentile([10, 20, 30, 40], 100) == 40
assert stats.percentile([10, 20, 30, 40], 0) == 10
assert stats.percentile([10, 20, 30, 40], 50) == 30
assert stats.percentile([4], 100) == 4
print("ok")
PY
then
  status=0
else
  status=1
fi
# Whatever the checks started (the agent's code among it) ends before the reward is written: a process
# left behind could otherwise rewrite the file after this script. kill(-1) spares this shell and pid 1.
kill -9 -1 2>/dev/null
mkdir -p /logs/verifier && rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
