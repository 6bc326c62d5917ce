"""``python -m leaderboard``: the same as ``envsuite leaderboard``."""

from __future__ import annotations

import sys

from envsuite.leaderboard._cli import cli_main

sys.exit(cli_main())
