#!/bin/bash
set -euo pipefail
cd /app
sed -i 's|/ (len(values) - 1)|/ len(values)|' stats.py
sed -i 's|    return ordered\[rank\]|    return ordered[min(rank, len(ordered) - 1)]|' stats.py
python3 test_stats.py
