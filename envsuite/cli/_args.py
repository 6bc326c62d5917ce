"""Argument parsing shared by several commands."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs to kwargs; values are parsed as JSON when they can be (numbers, bools, lists)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-arg expects KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    return kwargs
