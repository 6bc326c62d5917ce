#!/bin/bash
# Harbor verifier: reward 1 when every check below passes, else 0. The checks run with `python3 -I`
# (no user site, no current directory on the path: nothing the agent left in /app stands in for them).
mkdir -p /logs/verifier
if python3 -I - <<'PY'
"""Checks /app/report.csv against revenues computed here from the shipped rows (not from the database
the agent could have changed), and that the database is unchanged."""

import pathlib
import sqlite3

PRODUCTS = {
    1: ("kettle", 2599),
    2: ("mug", 899),
    3: ("teapot", 4150),
    4: ("spoon", 250),
    5: ("tray", 1875),
    6: ("cosy", 1200),
}
SALES = [(1, 3), (2, 12), (3, 1), (4, 40), (5, 2), (2, 9), (1, 2), (6, 5), (3, 2), (5, 4), (4, 15), (6, 3)]
revenue = {}
for product, quantity in SALES:
    name, price = PRODUCTS[product]
    revenue[name] = revenue.get(name, 0) + price * quantity
top = sorted(revenue.items(), key=lambda kv: -kv[1])[:3]
expected = ["name,revenue_cents"] + [f"{n},{r}" for n, r in top]
got = [line.strip() for line in pathlib.Path("/app/report.csv").read_text().splitlines() if line.strip()]
assert got == expected, f"report.csv is {got}, expected {expected}"
db = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
assert db.execute("SELECT count(*), sum(quantity) FROM sales").fetchone() == (
    len(SALES),
    sum(q for _, q in SALES),
)
assert db.execute("SELECT count(*) FROM products").fetchone() == (len(PRODUCTS),)
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
