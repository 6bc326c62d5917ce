#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Checks /app/people.json against the shipped CSV (its copy lives here, in /tests)."""

import csv
import json
import pathlib

shipped = pathlib.Path("/tests/people.csv").read_text()
assert pathlib.Path("/app/people.csv").read_text() == shipped, "people.csv was changed"
rows = list(csv.DictReader(shipped.splitlines()))
expected = [{**r, "age": int(r["age"]), "score": float(r["score"])} for r in rows]
got = json.loads(pathlib.Path("/app/people.json").read_text())
assert isinstance(got, list) and len(got) == len(expected), "people.json must be an array of every row"
for row, want in zip(got, expected, strict=True):
    assert isinstance(row, dict) and set(row) == set(want), f"keys {row!r}"
    assert (
        type(row["age"]) is int
        and isinstance(row["score"], (int, float))
        and not isinstance(row["score"], bool)
    )
    assert row == want, f"{row!r} != {want!r}"
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
