#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("people.csv", newline="")))
for r in rows:
    r["age"], r["score"] = int(r["age"]), float(r["score"])
json.dump(rows, open("people.json", "w"), indent=2)
PY
