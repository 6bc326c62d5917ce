"""Lookups in the probed table of textarena games (data in ``_table_data.py``, made by ``_probe``)."""

from __future__ import annotations

import difflib

from envsuite.games.textarena._records import GameRecord
from envsuite.games.textarena._table_data import TABLE

_BY_NAME = {r.name: r for r in TABLE}


def all_games() -> tuple[GameRecord, ...]:
    """Every textarena base game, runnable or not."""
    return TABLE


def available_games() -> tuple[GameRecord, ...]:
    """The games that ran here when the table was made."""
    return tuple(r for r in TABLE if r.unavailable is None)


def record(name: str) -> GameRecord:
    """The record for ``name`` (``TicTacToe``; a ``-v0`` suffix is tolerated)."""
    key = name.removesuffix("-v0")
    try:
        return _BY_NAME[key]
    except KeyError:
        close = difflib.get_close_matches(key, list(_BY_NAME), n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(f"no textarena game {name!r}.{hint}") from None
