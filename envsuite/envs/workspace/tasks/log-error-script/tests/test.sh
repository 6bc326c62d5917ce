#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Runs /app/errors.sh on logs it never saw (copies of them live here, in /tests)."""

import os
import pathlib
import subprocess
import tempfile

script = pathlib.Path("/app/errors.sh")
assert script.is_file() and os.access(script, os.X_OK), "errors.sh must exist and be executable"
cases = {
    "/tests/other.log": ["cache 3", "auth 2", "billing 1"],
}
with tempfile.TemporaryDirectory() as tmp:
    empty = pathlib.Path(tmp, "empty.log")
    empty.write_text("2026-07-02T08:00:00 INFO api ready\n")
    cases[str(empty)] = []
    for log, expected in cases.items():
        done = subprocess.run([str(script), log], capture_output=True, text=True, timeout=20, cwd=tmp)
        got = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        assert got == expected, f"{log}: printed {got}, expected {expected}"
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
