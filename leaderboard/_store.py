"""The result store: runs, episodes and matches in, rows out; every write is one transaction."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from types import TracebackType

from envsuite.leaderboard._db import Backend, Connection, Row, SqlValue, connect, default_url
from envsuite.leaderboard._ratings import ALL_GAMES, compute_ratings
from envsuite.leaderboard._records import (
    SAMPLES_SETTING,
    AddRunResult,
    EpisodeResult,
    MatchResult,
    Rating,
    ResultKey,
    RunRecord,
    StoredEpisode,
    StoredRun,
    canonical_json,
    split_env_id,
)
from envsuite.leaderboard._sanitize import environment_read_once, redact_text, sanitize
from envsuite.leaderboard._schema import current_version, migrate

_KEY_COLUMNS = (
    "k.model, k.env_id, k.env_version, k.partner, k.renderer, k.sampling, k.seeds, k.package_version"
)


class RunConflictError(ValueError):
    """A run id is already stored under a different result key (two different logs, one identity)."""


def _clean_key(key: ResultKey) -> ResultKey:
    sampling = canonical_json(sanitize(json.loads(key.sampling)))
    return dataclasses.replace(
        key,
        model=redact_text(key.model),
        env_id=redact_text(key.env_id),
        partner=redact_text(key.partner),
        renderer=redact_text(key.renderer),
        sampling=sampling,
        package_version=redact_text(key.package_version),
    )


def _key_values(key: ResultKey) -> tuple[str, str, int, str, str, str, str, str]:
    return (
        key.model,
        key.env_id,
        key.env_version,
        key.partner,
        key.renderer,
        key.sampling,
        key.seeds,
        key.package_version,
    )


def _key_from_row(row: Row) -> ResultKey:
    return ResultKey(
        model=row[0],
        env_id=row[1],
        env_version=int(row[2]),
        partner=row[3],
        renderer=row[4],
        sampling=row[5],
        seeds=row[6],
        package_version=row[7],
    )


def env_filter_sql(env_ids: Iterable[str] | None) -> tuple[str, list[SqlValue]]:
    """A WHERE fragment over ``k.env_id``/``k.env_version``; ``"math"`` matches every version."""
    if env_ids is None:
        return "1 = 1", []
    clauses: list[str] = []
    params: list[SqlValue] = []
    for env_id in env_ids:
        base, version = split_env_id(env_id)
        if base == env_id:
            clauses.append("k.env_id = ?")
            params.append(env_id)
        else:
            clauses.append("(k.env_id = ? AND k.env_version = ?)")
            params.extend([base, version])
    return ("(" + " OR ".join(clauses) + ")" if clauses else "1 = 0"), params


def _check_plays(key: ResultKey, episodes: Iterable[EpisodeResult]) -> None:
    """A key that declares K plays per episode holds epochs 1..K only: a run of another K belongs under
    its own key (pass@k from different K must never be pooled)."""
    samples = key.samples
    if samples == 1:
        return  # no declared K: any epochs (an Inspect log's own, a user's loop) are taken as they are
    wrong = sorted({ep.epoch for ep in episodes if not 1 <= ep.epoch <= samples})
    if wrong:
        raise ValueError(
            f"a run of {samples} plays per episode (sampling setting {SAMPLES_SETTING!r}) holds epoch(s) "
            f"{wrong}; results of another number of plays need their own key"
        )


class ResultStore:
    """Evaluation results and game outcomes in a SQLite file (default) or a PostgreSQL server.

    Safe to share between processes: SQLite runs in WAL mode with a busy timeout and every write
    takes the write lock up front. Writes are idempotent on run ids and match ids.
    """

    def __init__(self, url: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        """Open (and by default create) the store; ``create=False`` raises :class:`StoreNotFoundError`
        instead of making an empty SQLite file, for readers."""
        self.url = os.fspath(url) if url is not None else default_url()
        self._conn: Connection = connect(self.url, create=create)
        try:
            migrate(self._conn)
        except BaseException:
            self._conn.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return current_version(self._conn)

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``"ok"`` when sound); PostgreSQL always says ok."""
        if self._conn.backend != "sqlite":
            return "ok"
        return "\n".join(str(row[0]) for row in self._conn.query("PRAGMA integrity_check"))

    # -- writes ------------------------------------------------------------------------------

    def add_run(self, run: RunRecord, episodes: Iterable[EpisodeResult]) -> AddRunResult:
        """Store a run and its episodes; re-adding the same run id adds only episodes not yet stored."""
        episodes = list(episodes)
        _check_plays(run.key, episodes)
        lo, hi = run.reward_range if run.reward_range is not None else (None, None)
        with environment_read_once(), self._conn.transaction():
            key = _clean_key(run.key)
            self._conn.execute(
                "INSERT INTO result_keys (key_id, model, env_id, env_version, partner, renderer, sampling, "
                "seeds, package_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (key.key_id, *_key_values(key)),
            )
            run_added = self._conn.execute(
                "INSERT INTO runs (run_id, key_id, log_path, created_at, config, reward_lo, reward_hi, "
                "dataset_revision) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    redact_text(run.run_id),
                    key.key_id,
                    redact_text(run.log_path) if run.log_path is not None else None,
                    run.created_at,
                    canonical_json(sanitize(run.config)),
                    lo,
                    hi,
                    run.dataset_revision,
                ),
            )
            if not run_added:
                self._check_same_key(redact_text(run.run_id), key)
            added = sum(self._insert_episode(redact_text(run.run_id), ep) for ep in episodes)
        return AddRunResult(run_added=bool(run_added), episodes_added=added)

    def _check_same_key(self, run_id: str, key: ResultKey) -> None:
        rows = self._conn.query("SELECT key_id FROM runs WHERE run_id = ?", (run_id,))
        if rows and rows[0][0] != key.key_id:
            raise RunConflictError(
                f"run id {run_id!r} is already stored under another result key; "
                "a run id must identify one log (use the eval id or file_identity(path))"
            )

    def _insert_episode(self, run_id: str, ep: EpisodeResult) -> int:
        success = None if ep.success is None else int(bool(ep.success))
        return self._conn.execute(
            "INSERT INTO episodes (run_id, seed, epoch, reward, success, metrics, transcript_ref) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (
                run_id,
                ep.seed,
                ep.epoch,
                float(ep.reward),
                success,
                canonical_json(sanitize(ep.metrics)),
                redact_text(ep.transcript_ref) if ep.transcript_ref is not None else None,
            ),
        )

    def add_matches(self, matches: Iterable[MatchResult]) -> int:
        """Store head-to-head results and bring the ratings up to date, in one transaction.

        A match id already stored is skipped. Returns how many matches were new.
        """
        added = 0
        with environment_read_once(), self._conn.transaction():
            self._lock_ratings()
            for match in matches:
                added += self._insert_match(match)
            if added:
                self._write_ratings(compute_ratings(self.matches()))
        return added

    def _insert_match(self, match: MatchResult) -> int:
        match_id = redact_text(match.match_id)
        new = self._conn.execute(
            "INSERT INTO matches (match_id, env_id, played_at, run_id) VALUES (?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (match_id, redact_text(match.env_id), match.played_at, match.run_id),
        )
        if not new:
            return 0
        for seat, (player, rank) in enumerate(zip(match.players, match.ranks, strict=True)):
            self._conn.execute(
                "INSERT INTO match_players (match_id, seat, player, player_rank) VALUES (?, ?, ?, ?)",
                (match_id, seat, redact_text(player), rank),
            )
        return 1

    def _lock_ratings(self) -> None:
        # SQLite's BEGIN IMMEDIATE already serialises writers. On PostgreSQL two writers could each
        # rate a snapshot missing the other's matches, and the later commit would win: take a lock
        # that writers of matches queue on (plain reads still proceed).
        if self._conn.backend is Backend.POSTGRES:
            self._conn.execute("LOCK TABLE ratings IN EXCLUSIVE MODE")

    def replace_ratings(self, ratings: Iterable[Rating]) -> None:
        """Swap the stored ratings table for ``ratings`` in one transaction."""
        with self._conn.transaction():
            self._write_ratings(ratings)

    def recompute_ratings(self) -> list[Rating]:
        """Replay every stored match and replace the stored ratings (``add_matches`` does this itself)."""
        with self._conn.transaction():
            self._lock_ratings()
            ratings = compute_ratings(self.matches())
            self._write_ratings(ratings)
        return ratings

    def _write_ratings(self, ratings: Iterable[Rating]) -> None:
        self._conn.execute("DELETE FROM ratings")
        for r in ratings:
            self._conn.execute(
                "INSERT INTO ratings (pool, player, mu, sigma, ordinal, matches) VALUES (?, ?, ?, ?, ?, ?)",
                (r.pool, r.player, r.mu, r.sigma, r.ordinal, r.matches),
            )

    # -- reads -------------------------------------------------------------------------------

    def keys(self, env_ids: Iterable[str] | None = None) -> list[ResultKey]:
        where, params = env_filter_sql(env_ids)
        rows = self._conn.query(f"SELECT {_KEY_COLUMNS} FROM result_keys k WHERE {where}", params)
        return sorted((_key_from_row(r) for r in rows), key=lambda k: (k.versioned_env_id, k.model, k.key_id))

    def runs(self, env_ids: Iterable[str] | None = None) -> list[StoredRun]:
        where, params = env_filter_sql(env_ids)
        rows = self._conn.query(
            f"SELECT {_KEY_COLUMNS}, r.run_id, r.log_path, r.created_at, r.config, r.reward_lo, r.reward_hi, "
            "(SELECT COUNT(*) FROM episodes e WHERE e.run_id = r.run_id), r.dataset_revision "
            f"FROM runs r JOIN result_keys k ON k.key_id = r.key_id WHERE {where} "
            "ORDER BY r.created_at, r.run_id",
            params,
        )
        return [
            StoredRun(
                key=_key_from_row(row),
                run_id=row[8],
                log_path=row[9],
                created_at=row[10],
                config=json.loads(row[11]),
                reward_range=(float(row[12]), float(row[13])) if row[12] is not None else None,
                n_episodes=int(row[14]),
                dataset_revision=row[15],
            )
            for row in rows
        ]

    def episodes(self, env_ids: Iterable[str] | None = None) -> list[StoredEpisode]:
        where, params = env_filter_sql(env_ids)
        rows = self._conn.query(
            f"SELECT {_KEY_COLUMNS}, r.run_id, r.log_path, e.seed, e.epoch, e.reward, e.success, e.metrics, "
            "e.transcript_ref FROM episodes e JOIN runs r ON r.run_id = e.run_id "
            f"JOIN result_keys k ON k.key_id = r.key_id WHERE {where} ORDER BY r.run_id, e.seed, e.epoch",
            params,
        )
        return [
            StoredEpisode(
                key=_key_from_row(row),
                run_id=row[8],
                log_path=row[9],
                episode=EpisodeResult(
                    seed=int(row[10]),
                    epoch=int(row[11]),
                    reward=float(row[12]),
                    success=None if row[13] is None else bool(row[13]),
                    metrics=json.loads(row[14]),
                    transcript_ref=row[15],
                ),
            )
            for row in rows
        ]

    def matches(self, env_ids: Iterable[str] | None = None) -> list[MatchResult]:
        """Stored matches in replay order (``played_at``, then ``match_id``)."""
        rows = self._conn.query(
            "SELECT m.match_id, m.env_id, m.played_at, m.run_id, p.player, p.player_rank FROM matches m "
            "JOIN match_players p ON p.match_id = m.match_id ORDER BY m.played_at, m.match_id, p.seat"
        )
        wanted = None if env_ids is None else set(env_ids)
        # match id -> (env id, played at, run id, players by seat, their ranks)
        grouped: dict[str, tuple[str, str, str | None, list[str], list[int]]] = {}
        for match_id, env_id, played_at, run_id, player, rank in rows:
            if wanted is not None and env_id not in wanted and split_env_id(env_id)[0] not in wanted:
                continue
            entry = grouped.setdefault(match_id, (env_id, played_at, run_id, [], []))
            entry[3].append(player)
            entry[4].append(int(rank))
        return [
            MatchResult(mid, env, tuple(players), tuple(ranks), played_at, run_id)
            for mid, (env, played_at, run_id, players, ranks) in grouped.items()
        ]

    def ratings(self, pool: str | None = None) -> list[Rating]:
        """Current ratings, best first (by ordinal) within each pool.

        Stores written before ratings were kept current on every ``add_matches`` may hold a stale
        table; that shows as a seat count that differs from the all-games pool's match counts, and
        the ratings are then replayed from the stored matches (without writing).
        """
        rows = self._conn.query(
            "SELECT pool, player, mu, sigma, ordinal, matches FROM ratings ORDER BY pool, ordinal DESC, player"
        )
        ratings = [
            Rating(row[0], row[1], float(row[2]), float(row[3]), float(row[4]), int(row[5])) for row in rows
        ]
        seats = int(self._conn.query("SELECT COUNT(*) FROM match_players")[0][0])
        if seats != sum(r.matches for r in ratings if r.pool == ALL_GAMES):
            ratings = compute_ratings(self.matches())
        return [r for r in ratings if pool is None or r.pool == pool]


def recompute_ratings(store: ResultStore) -> list[Rating]:
    """Recompute every pool from the stored matches and replace the stored ratings table."""
    return store.recompute_ratings()
