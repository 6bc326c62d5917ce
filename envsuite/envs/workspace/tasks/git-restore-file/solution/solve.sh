#!/bin/bash
set -euo pipefail
cd /app/repo
git checkout v1 -- config.yaml
git commit -q -m "Restore config.yaml from v1"
