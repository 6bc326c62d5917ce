"""The store's schema, as an ordered list of migrations recorded in a ``schema_version`` table."""

from __future__ import annotations

from dataclasses import dataclass

from envsuite.errors import UsageError
from envsuite.leaderboard._db import Connection
from envsuite.leaderboard._records import utc_now


@dataclass(frozen=True)
class Migration:
    """One schema step; ``statements`` run in a single transaction with the version bump."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1 = (
    """CREATE TABLE IF NOT EXISTS result_keys (
        key_id TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        env_id TEXT NOT NULL,
        env_version BIGINT NOT NULL,
        partner TEXT NOT NULL,
        renderer TEXT NOT NULL,
        sampling TEXT NOT NULL,
        seeds TEXT NOT NULL,
        package_version TEXT NOT NULL,
        UNIQUE (model, env_id, env_version, partner, renderer, sampling, seeds, package_version)
    )""",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        key_id TEXT NOT NULL REFERENCES result_keys (key_id),
        log_path TEXT,
        created_at TEXT NOT NULL,
        config TEXT NOT NULL,
        reward_lo DOUBLE PRECISION,
        reward_hi DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS runs_by_key ON runs (key_id)",
    """CREATE TABLE IF NOT EXISTS episodes (
        run_id TEXT NOT NULL REFERENCES runs (run_id),
        seed BIGINT NOT NULL,
        epoch BIGINT NOT NULL,
        reward DOUBLE PRECISION NOT NULL,
        success BIGINT,
        metrics TEXT NOT NULL,
        transcript_ref TEXT,
        PRIMARY KEY (run_id, seed, epoch)
    )""",
    """CREATE TABLE IF NOT EXISTS matches (
        match_id TEXT PRIMARY KEY,
        env_id TEXT NOT NULL,
        played_at TEXT NOT NULL,
        run_id TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS match_players (
        match_id TEXT NOT NULL REFERENCES matches (match_id),
        seat BIGINT NOT NULL,
        player TEXT NOT NULL,
        player_rank BIGINT NOT NULL,
        PRIMARY KEY (match_id, seat)
    )""",
    """CREATE TABLE IF NOT EXISTS ratings (
        pool TEXT NOT NULL,
        player TEXT NOT NULL,
        mu DOUBLE PRECISION NOT NULL,
        sigma DOUBLE PRECISION NOT NULL,
        ordinal DOUBLE PRECISION NOT NULL,
        matches BIGINT NOT NULL,
        PRIMARY KEY (pool, player)
    )""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "keys, runs, episodes, matches, ratings", _V1),
    # Which data a run's scores came from (a dataset's revision or a content hash of its items), so a
    # changed dataset is visible next to its scores; NULL for runs stored before it was recorded.
    Migration(2, "runs.dataset_revision", ("ALTER TABLE runs ADD COLUMN dataset_revision TEXT",)),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


class SchemaTooNewError(UsageError, RuntimeError):
    """The database was written by a newer envsuite than this one."""


def current_version(conn: Connection) -> int:
    rows = conn.query("SELECT MAX(version) FROM schema_version")
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def migrate(conn: Connection) -> int:
    """Bring the schema up to :data:`SCHEMA_VERSION`; safe to call from many processes at once.

    Returns the version the database was at before. The version check and the steps share one
    write transaction, so two processes opening a fresh file do not both apply a step.
    """
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL, "
            "description TEXT NOT NULL)"
        )
        before = current_version(conn)
        if before > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"leaderboard store has schema version {before}; this envsuite knows up to {SCHEMA_VERSION}. "
                "Upgrade envsuite to read it."
            )
        for migration in MIGRATIONS:
            if migration.version <= before:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at, description) VALUES (?, ?, ?)",
                (migration.version, utc_now(), migration.description),
            )
    return before
