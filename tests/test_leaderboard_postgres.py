"""The leaderboard store on a real PostgreSQL server (started by the suite on loopback), and many
`envsuite bench` processes sharing one store, on PostgreSQL and on SQLite.

Same schema, same guarantees: idempotent imports, keys that never merge, refusing a schema from the
future, and concurrent writers that lose nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envsuite.leaderboard import (
    SCHEMA_VERSION,
    ResultStore,
    RunConflictError,
    RunRecord,
    SchemaTooNewError,
    build_leaderboard,
    parse_url,
)
from tests.conftest import TEST_MODEL
from tests.test_leaderboard_store import _EPISODES_EACH, _RUNS_EACH, _WRITERS, _writer, episodes, make_key

REPO = Path(__file__).parents[1]


def test_roundtrip_idempotency_and_conflicts_on_postgres(postgres_url: str) -> None:
    assert parse_url(postgres_url).backend == "postgresql"
    key = make_key()
    with ResultStore(postgres_url) as store:
        assert store.schema_version == SCHEMA_VERSION
        first = store.add_run(RunRecord(key, "eval-1", log_path="logs/a.eval", config={"k": 1}), episodes(4))
        assert first.run_added and first.episodes_added == 4
        again = store.add_run(RunRecord(key, "eval-1"), episodes(6))
        assert not again.run_added and again.episodes_added == 2
        assert store.keys() == [key]
        (run,) = store.runs()
        assert (run.run_id, run.n_episodes, dict(run.config)) == ("eval-1", 6, {"k": 1})
        assert [e.episode for e in store.episodes()] == episodes(6)
        hotter = make_key(sampling={"temperature": 1.0, "max_tokens": 64})
        store.add_run(RunRecord(hotter, "eval-2", reward_range=(-1.0, 1.0)), episodes(6, reward=0.0))
        assert len(store.keys()) == 2
        board = build_leaderboard(store, n_boot=100)
        assert sorted(e.reward.mean for e in board.entries) == [0.0, 1.0]
        with pytest.raises(RunConflictError, match="another result key"):
            store.add_run(RunRecord(hotter, "eval-1"), episodes(1))
    with ResultStore(postgres_url) as reopened:  # reopening migrates nothing and keeps the rows
        assert reopened.schema_version == SCHEMA_VERSION and len(reopened.episodes()) == 12


def test_schema_from_the_future_is_refused_on_postgres(postgres_url: str) -> None:
    import psycopg

    ResultStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 'x', 'future')")
    with pytest.raises(SchemaTooNewError, match="99"):
        ResultStore(postgres_url)


def test_eight_concurrent_writers_lose_nothing_on_postgres(postgres_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(_WRITERS)
    procs = [ctx.Process(target=_writer, args=(postgres_url, i, barrier)) for i in range(_WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * _WRITERS
    with ResultStore(postgres_url) as store:
        runs = store.runs()
        assert len(runs) == _WRITERS * _RUNS_EACH + 1
        assert all(r.n_episodes == _EPISODES_EACH for r in runs)
        assert len(store.episodes()) == (_WRITERS * _RUNS_EACH + 1) * _EPISODES_EACH
        assert len(store.matches()) == _WRITERS * 3
        assert len(store.keys()) == _WRITERS + 1


_BENCHES = 8
_BENCH_EPISODES = 3


def _concurrent_benches(db: str, tmp_path: Path) -> None:
    """Start 8 `envsuite bench` processes on one store at once; each must store all its episodes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen(
            [
                str(Path(sys.executable).parent / "envsuite"),
                "bench",
                "--model",
                TEST_MODEL,
                "--label",
                f"bench-{i}",
                "--envs",
                "tictactoe",
                "--episodes",
                str(_BENCH_EPISODES),
                "--seed",
                str(i),
                "--max-tokens",
                "8",
                "--log-dir",
                str(tmp_path / "logs"),
                "--db",
                db,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(_BENCHES)
    ]
    outputs = [p.communicate(timeout=540)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
    with ResultStore(db) as store:
        runs = store.runs()
        assert len(runs) == _BENCHES
        assert sorted({r.key.model for r in runs}) == sorted(f"bench-{i}" for i in range(_BENCHES))
        assert all(r.n_episodes == _BENCH_EPISODES for r in runs)
        assert len(store.episodes()) == _BENCHES * _BENCH_EPISODES
        assert len(store.matches()) == _BENCHES * _BENCH_EPISODES  # one game per tictactoe episode


def test_eight_concurrent_benches_lose_no_rows_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    _concurrent_benches(postgres_url, tmp_path)


def test_eight_concurrent_benches_lose_no_rows_on_sqlite(tmp_path: Path) -> None:
    _concurrent_benches(str(tmp_path / "shared.sqlite"), tmp_path)
