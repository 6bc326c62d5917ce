#!/bin/bash
# Builds the repository (what a Dockerfile's RUN would do in Harbor); fixed dates, so fixed hashes.
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.invalid GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.invalid
commit() { GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1" git commit -q -m "$2"; }
git init -q -b main /app/repo
cd /app/repo
printf 'name: demo\nport: 8080\n' > config.yaml
printf 'print("app")\n' > app.py
git add -A && commit 2026-02-01T10:00:00Z "Initial version"
printf 'name: demo\nport: 8081\nworkers: 4\n' > config.yaml
git add -A && commit 2026-02-02T10:00:00Z "Tune the server" && git tag v1
printf 'print("app v2")\n' > app.py
git add -A && commit 2026-02-03T10:00:00Z "App v2"
git rm -q config.yaml && commit 2026-02-04T10:00:00Z "Drop the config"
printf 'print("app v3")\n' > app.py
git add -A && commit 2026-02-05T10:00:00Z "App v3"
