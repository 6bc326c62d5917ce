"""Runs record the dataset revision they ran on; a store from before the column gains it (migration 2)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envsuite.leaderboard import (
    MIGRATIONS,
    SCHEMA_VERSION,
    ResultStore,
    RunRecord,
    board_dict,
    build_leaderboard,
)
from tests.test_leaderboard_store import episodes, make_key

_OLD_RUN = (
    "INSERT INTO result_keys VALUES ('k0', 'old-model', 'arithmetic', 0, 'builtin', 'chatml', '{}', '[0]', '0.1')",
    "INSERT INTO runs VALUES ('eval-old', 'k0', NULL, '2026-01-01T00:00:00Z', '{}', 0.0, 1.0)",
    "INSERT INTO schema_version VALUES (1, '2026-01-01T00:00:00Z', 'keys, runs, episodes, matches, ratings')",
)


def _write_v1(execute: Callable[[str], Any]) -> None:
    """A store as envsuite wrote it before migration 2: schema 1 and one run."""
    execute(
        "CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL, description TEXT NOT NULL)"
    )
    for statement in (*MIGRATIONS[0].statements, *_OLD_RUN):
        execute(statement)


def _check_migrated(url: str) -> None:
    with ResultStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 2
        (old,) = store.runs()
        assert (old.run_id, old.dataset_revision) == ("eval-old", None)  # not known for older runs
        store.add_run(RunRecord(make_key(), "eval-new", dataset_revision="sha256:abc"), episodes(2))
    with ResultStore(url) as reopened:
        assert {r.run_id: r.dataset_revision for r in reopened.runs()} == {
            "eval-old": None,
            "eval-new": "sha256:abc",
        }


def test_an_old_sqlite_store_gains_the_dataset_revision_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        _write_v1(db.execute)
    _check_migrated(str(path))


def test_an_old_postgres_store_gains_the_dataset_revision_column(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        _write_v1(conn.execute)
    _check_migrated(postgres_url)


@pytest.mark.parametrize("revision", [None, "hf:0123abcd"])
def test_a_fresh_store_round_trips_the_revision(tmp_path: Path, revision: str | None) -> None:
    with ResultStore(str(tmp_path / "board.sqlite")) as store:
        store.add_run(RunRecord(make_key(), "eval-1", dataset_revision=revision), episodes(1))
        assert store.runs()[0].dataset_revision == revision
        (entry,) = board_dict(build_leaderboard(store, n_boot=10))["entries"]
        assert entry["dataset_revisions"] == ([revision] if revision else [])  # `leaderboard --json` shows it
