"""``python -m envsuite ...``: the ``envsuite`` command, for scripts and notebooks that avoid PATH lookups."""

from __future__ import annotations

import sys

from envsuite.cli import main

if __name__ == "__main__":
    sys.exit(main())
