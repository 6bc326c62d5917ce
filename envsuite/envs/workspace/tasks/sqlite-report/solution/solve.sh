#!/bin/bash
set -euo pipefail
cd /app
{
  echo "name,revenue_cents"
  sqlite3 -csv shop.db "SELECT p.name, SUM(p.price_cents * s.quantity) AS revenue
    FROM sales s JOIN products p ON p.id = s.product_id GROUP BY p.id ORDER BY revenue DESC LIMIT 3;"
} > report.csv
