"""Database connections: SQLite files (the default) and, through an optional driver, PostgreSQL.

The store speaks one portable SQL dialect (``?`` placeholders, ``ON CONFLICT DO NOTHING``, TEXT /
BIGINT / DOUBLE PRECISION columns); this module adapts placeholders and transactions per backend.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

from envsuite.errors import UsageError

BUSY_TIMEOUT_S = 60.0
"""How long a writer waits for another writer's lock before failing."""

DEFAULT_DB_ENV = "ENVSUITE_LEADERBOARD_DB"
DEFAULT_DB_PATH = Path("runs") / "leaderboard.sqlite"

SqlValue: TypeAlias = str | int | float | bytes | None
"""A value the store binds to a placeholder."""
Params: TypeAlias = Sequence[SqlValue]
Row: TypeAlias = tuple[Any, ...]
"""A result row. Its columns have the types the query selects, which only the SQL text says, so readers
convert each one where its type matters (``int(row[2])``, ``json.loads(row[11])``)."""


class Backend(StrEnum):
    """Which database a URL points at."""

    SQLITE = "sqlite"
    POSTGRES = "postgresql"


class StoreURLError(UsageError):
    """A database URL the store cannot open."""


class MissingDriverError(UsageError, ImportError):
    """The URL needs an optional database driver that is not installed."""


class StoreNotFoundError(UsageError, FileNotFoundError):
    """A store opened for reading (``create=False``) does not exist."""


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed store location."""

    backend: Backend
    target: str
    """A filesystem path (or ``:memory:``) for SQLite, the DSN for PostgreSQL."""


def default_url() -> str:
    """``$ENVSUITE_LEADERBOARD_DB`` if set, else ``runs/leaderboard.sqlite`` under the working dir."""
    return os.environ.get(DEFAULT_DB_ENV) or str(DEFAULT_DB_PATH)


def parse_url(url: str | os.PathLike[str]) -> DatabaseURL:
    """Accept ``sqlite:///rel.db``, ``sqlite:////abs.db``, plain paths and ``postgresql://...``."""
    text = os.fspath(url)
    if not text:
        raise StoreURLError("empty database URL")
    if text.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return DatabaseURL(Backend.POSTGRES, text.replace("postgresql+psycopg://", "postgresql://", 1))
    if text in ("sqlite://", "sqlite:///:memory:", ":memory:"):
        return DatabaseURL(Backend.SQLITE, ":memory:")
    if text.startswith("sqlite:///"):
        return DatabaseURL(Backend.SQLITE, text[len("sqlite:///") :])
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreURLError(
            f"unsupported database URL scheme {scheme!r}: use a file path, sqlite:///PATH or postgresql://..."
        )
    return DatabaseURL(Backend.SQLITE, text)


class Connection(Protocol):
    """What the store needs from a database connection."""

    backend: Backend

    def query(self, sql: str, params: Params = ()) -> list[Row]: ...

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; return the number of rows it changed."""
        ...

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def close(self) -> None: ...


class SQLiteConnection:
    """SQLite in WAL mode with a busy timeout: concurrent writers queue instead of failing."""

    backend = Backend.SQLITE

    def __init__(self, path: str, *, create: bool = True) -> None:
        if path != ":memory:" and create:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a writer takes the write lock
        # up front (and waits for it) instead of failing on a read-to-write upgrade.
        self._conn = _open_sqlite(path, create=create)
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if path != ":memory:":
            _enable_wal(self._conn)
            self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._depth = 0

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        return [tuple(row) for row in self._conn.execute(sql, tuple(params)).fetchall()]

    def execute(self, sql: str, params: Params = ()) -> int:
        return self._conn.execute(sql, tuple(params)).rowcount

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            yield  # nested: the outer transaction commits
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")
        finally:
            self._depth = 0

    def close(self) -> None:
        self._conn.close()


WRITE_LOCK_KEY = 0x656E7673
"""The PostgreSQL advisory lock every write transaction holds (``'envs'`` as an int)."""


class PostgresConnection:
    """PostgreSQL through psycopg 3 (optional; imported only when a postgresql:// URL is opened).

    Every write transaction first takes one transaction-scoped advisory lock, so writers queue one at
    a time as they do on SQLite (``BEGIN IMMEDIATE``). That gives the same guarantees on both: two
    processes creating the schema at once do not race on the catalog (PostgreSQL's ``CREATE TABLE IF
    NOT EXISTS`` is not safe against a concurrent create), and a delete-then-insert swap (ratings) never
    interleaves with another. Reads take no lock.
    """

    backend = Backend.POSTGRES

    def __init__(self, dsn: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise MissingDriverError(
                "a postgresql:// leaderboard store needs the psycopg driver: pip install 'psycopg[binary]'"
            ) from exc
        self._conn: psycopg.Connection[TupleRow] = psycopg.connect(dsn, autocommit=True)
        self._depth = 0

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        with self._conn.cursor() as cur:
            cur.execute(adapt_placeholders(sql), tuple(params))
            return [tuple(row) for row in cur.fetchall()]

    def execute(self, sql: str, params: Params = ()) -> int:
        with self._conn.cursor() as cur:
            cur.execute(adapt_placeholders(sql), tuple(params))
            return int(cur.rowcount)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            yield  # nested: the outer transaction holds the lock and commits
            return
        with self._conn.transaction():
            self._depth = 1
            try:
                self.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK_KEY,))
                yield
            finally:
                self._depth = 0

    def close(self) -> None:
        self._conn.close()


def adapt_placeholders(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (the store's SQL has no ``?`` or ``%`` in literals)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _open_sqlite(path: str, *, create: bool) -> sqlite3.Connection:
    if create or path == ":memory:":
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    # mode=rw opens an existing file and fails instead of creating an empty store.
    uri = Path(path).resolve().as_uri() + "?mode=rw"
    try:
        return sqlite3.connect(uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True)
    except sqlite3.OperationalError as exc:
        raise StoreNotFoundError(f"no leaderboard store at {path}") from exc


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch a store to WAL once (the mode persists in the file).

    Changing the journal mode needs an exclusive lock and SQLite does not apply the busy timeout to
    it, so several processes opening a fresh store at once see "database is locked": retry with
    backoff until the busy timeout, and skip the switch when another process already made it.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.01
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def connect(url: str | os.PathLike[str], *, create: bool = True) -> Connection:
    """Open a connection for a store URL or path; ``create=False`` refuses to make a new SQLite file."""
    parsed = parse_url(url)
    if parsed.backend is Backend.POSTGRES:
        return PostgresConnection(parsed.target)
    return SQLiteConnection(parsed.target, create=create)
