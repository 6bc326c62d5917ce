#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Checks /app/repo with git plumbing only (no hooks, pager or fsmonitor run; no global config)."""

import subprocess

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(*args):
    return subprocess.run(
        ["git", "-C", "/app/repo", *args], env=ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


OLD_TIP = "App v3"
head = git("rev-parse", "refs/heads/main")
parent = git("rev-parse", head + "^1")
assert git("log", "-1", "--format=%s", parent) == OLD_TIP, "main must be the old tip plus one commit"
assert len(git("rev-list", "--parents", "-n", "1", head).split()) == 2, "one parent: not a merge"
assert git("rev-list", "--count", "refs/heads/main") == "6", "the history before must stay"
want = "name: demo\nport: 8081\nworkers: 4"
assert git("cat-file", "blob", head + ":config.yaml") == want, "config.yaml must be v1's"
assert git("cat-file", "blob", head + ":app.py") == 'print("app v3")', "app.py must stay as it was"
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
