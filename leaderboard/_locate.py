"""Which store to read when the user did not say: the default one, else the one under ``runs/``.

Reading never creates a store. Without a URL the default store is read when it exists; otherwise the
stores under ``runs/`` (where ``envsuite bench`` and ``make demo`` write) are looked for: one is read and
named, several are listed (``envsuite leaderboard`` is the command that asks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envsuite.errors import UsageError
from envsuite.leaderboard._db import DEFAULT_DB_ENV, Backend, default_url, parse_url

STORE_SEARCH_ROOT = Path("runs")
STORE_FILE_NAME = "leaderboard.sqlite"


@dataclass(frozen=True)
class StoreChoice:
    """Which store to read, and a line saying why when the user did not name it."""

    url: str
    note: str | None = None


class NoStoreError(UsageError, LookupError):
    """No store to read (the message says where results were looked for)."""


def find_stores(root: Path = STORE_SEARCH_ROOT) -> list[Path]:
    """SQLite stores under ``root`` (the default store included), nearest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.rglob(STORE_FILE_NAME) if p.is_file()]
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def choose_store(db: str | None) -> StoreChoice:
    """The store ``envsuite leaderboard`` reads: ``--db``, else the default, else the one under runs/."""
    if db is not None:
        return StoreChoice(db)
    url = default_url()
    parsed = parse_url(url)
    if parsed.backend is Backend.POSTGRES or parsed.target == ":memory:" or Path(parsed.target).exists():
        return StoreChoice(url)
    if os.environ.get(DEFAULT_DB_ENV):
        raise NoStoreError(f"no leaderboard store at {url} (from ${DEFAULT_DB_ENV})")
    stores = find_stores()
    if len(stores) == 1:
        return StoreChoice(str(stores[0]), f"no store at {url}; reading {stores[0]}, the one under runs/")
    if stores:
        listed = "\n".join(f"  envsuite leaderboard --db {p}" for p in stores)
        raise NoStoreError(f"no store at {url}; {len(stores)} stores under runs/, pick one:\n{listed}")
    raise NoStoreError(
        f"no leaderboard store at {url}: `envsuite bench --model M` writes results there "
        f"(`make demo` writes runs/demo/{STORE_FILE_NAME}); or pass --db PATH|URL"
    )
