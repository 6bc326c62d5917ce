#!/bin/bash
# Builds /app/shop.db (what a Dockerfile's RUN would do in Harbor).
set -euo pipefail
cd /app
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("shop.db")
db.executescript("""
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE sales (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id),
                    quantity INTEGER NOT NULL, day TEXT NOT NULL);
INSERT INTO products (name, price_cents) VALUES
  ('kettle', 2599), ('mug', 899), ('teapot', 4150), ('spoon', 250), ('tray', 1875), ('cosy', 1200);
INSERT INTO sales (product_id, quantity, day) VALUES
  (1, 3, '2026-05-01'), (2, 12, '2026-05-01'), (3, 1, '2026-05-02'), (4, 40, '2026-05-02'),
  (5, 2, '2026-05-03'), (2, 9, '2026-05-03'), (1, 2, '2026-05-04'), (6, 5, '2026-05-04'),
  (3, 2, '2026-05-05'), (5, 4, '2026-05-05'), (4, 15, '2026-05-06'), (6, 3, '2026-05-06');
""")
db.commit()
PY
