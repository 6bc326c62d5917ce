#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Checks /app/top.txt against the counts of the essay as shipped (its copy lives here, in /tests)."""

import collections
import pathlib
import re

shipped = pathlib.Path("/tests/essay.txt").read_text()
assert pathlib.Path("/app/essay.txt").read_text() == shipped, "essay.txt was changed"
counts = collections.Counter(re.findall(r"[a-z]+", shipped.lower()))
expected = [f"{w} {n}" for w, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
got = [line.strip() for line in pathlib.Path("/app/top.txt").read_text().splitlines() if line.strip()]
assert got == expected, f"top.txt is {got}, expected {expected}"
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
