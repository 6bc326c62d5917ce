"""What several commands share: the sub-parser type, ``--env-arg`` pairs, and defaults read from configs."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any, TypeAlias

from envsuite.errors import UsageError

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``add_subparsers`` returns: each command module's ``add_parser`` adds its parser to it."""


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs to kwargs; values are parsed as JSON when they can be (numbers, bools, lists)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--env-arg expects KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    return kwargs


def field_defaults(config_class: type) -> dict[str, Any]:
    """A config dataclass's field defaults by name (fields without one are left out), so a command's
    flags show and use the config's own values instead of a copy of them."""
    defaults: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = field.default_factory()
    return defaults
