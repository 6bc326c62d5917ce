"""The leaderboard store: schema, keys, idempotent imports, secrets, URLs and concurrent writers."""

from __future__ import annotations

import importlib.util
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from envsuite.leaderboard import (
    REDACTED,
    SCHEMA_VERSION,
    EpisodeResult,
    MatchResult,
    MissingDriverError,
    ResultKey,
    ResultStore,
    RunConflictError,
    RunRecord,
    SchemaTooNewError,
    StoreURLError,
    build_leaderboard,
    canonical_seeds,
    file_identity,
    is_secret_name,
    parse_url,
    redact_text,
    write_html,
)


def make_key(model: str = "m1", env_id: str = "arithmetic-v0", **overrides: object) -> ResultKey:
    fields: dict[str, object] = {
        "model": model,
        "env_id": env_id,
        "renderer": "chatml",
        "sampling": {"temperature": 0.7, "max_tokens": 64},
        "seeds": range(4),
        "package_version": "0.1.0",
    }
    fields.update(overrides)
    return ResultKey.create(**fields)  # type: ignore[arg-type]


def episodes(n: int, reward: float = 1.0) -> list[EpisodeResult]:
    return [EpisodeResult(seed=s, reward=reward, success=reward > 0) for s in range(n)]


def test_key_canonicalises_sampling_seeds_and_version() -> None:
    a = make_key(sampling={"max_tokens": 64, "temperature": 0.7}, seeds=[3, 1, 2, 0, 1])
    b = make_key(sampling={"temperature": 0.7, "max_tokens": 64}, seeds=range(4))
    assert a == b and a.key_id == b.key_id
    assert (a.env_id, a.env_version, a.versioned_env_id) == ("arithmetic", 0, "arithmetic-v0")
    assert a.seeds == canonical_seeds([0, 1, 2, 3]) == "[0,1,2,3]"
    assert make_key(env_id="math", env_version=2).versioned_env_id == "math-v2"
    with pytest.raises(ValueError, match="disagrees"):
        make_key(env_id="math-v1", env_version=2)
    with pytest.raises(ValueError, match="non-empty"):
        make_key(model="")
    with pytest.raises(TypeError, match="seed"):
        make_key(seeds=[1.5])
    with pytest.raises(ValueError, match="canonical JSON"):
        make_key(sampling={"temperature": float("nan")})
    with pytest.raises(ValueError, match="canonical JSON"):
        make_key(sampling={"stop": object()})


def test_bad_records_are_refused_with_clear_errors() -> None:
    with pytest.raises(ValueError, match="finite"):
        EpisodeResult(seed=0, reward=float("nan"))
    with pytest.raises(ValueError, match="twice"):
        MatchResult("g1", "tictactoe-v0", ("a", "a"), (0, 1))
    with pytest.raises(ValueError, match="one rank per player"):
        MatchResult("g1", "tictactoe-v0", ("a", "b"), (0,))
    with pytest.raises(ValueError, match="lo < hi"):
        RunRecord(make_key(), "r1", reward_range=(1.0, 1.0))
    with pytest.raises(ValueError, match="log identity"):
        RunRecord(make_key(), "")


def test_roundtrip_schema_and_wal(tmp_path: Path) -> None:
    db = tmp_path / "lb.sqlite"
    key = make_key()
    with ResultStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        result = store.add_run(RunRecord(key, "eval-1", log_path="logs/a.eval", config={"k": 1}), episodes(4))
        assert result.run_added and result.episodes_added == 4
        assert store.keys() == [key]
        (run,) = store.runs()
        assert (run.run_id, run.log_path, run.n_episodes, dict(run.config)) == (
            "eval-1",
            "logs/a.eval",
            4,
            {"k": 1},
        )
        stored = store.episodes()
        assert [e.episode for e in stored] == episodes(4)
        assert {str(e.sample_id) for e in stored} == {f"arithmetic-v0#{s}" for s in range(4)}
        assert store.integrity_check() == "ok"
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()
    with ResultStore(f"sqlite:///{db}") as again:  # reopening migrates nothing and keeps the rows
        assert again.schema_version == SCHEMA_VERSION and len(again.episodes()) == 4


def test_reimport_is_idempotent_and_keys_never_merge(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "lb.sqlite") as store:
        key = make_key()
        run = RunRecord(key, "eval-1")
        store.add_run(run, episodes(4))
        again = store.add_run(run, episodes(4))
        assert not again.run_added and again.episodes_added == 0
        # A partial log imported earlier gains only its new samples.
        more = store.add_run(run, episodes(6))
        assert more.episodes_added == 2
        hotter = make_key(sampling={"temperature": 1.0, "max_tokens": 64})
        store.add_run(RunRecord(hotter, "eval-2"), episodes(6, reward=0.0))
        assert len(store.keys()) == 2 and len(store.episodes()) == 12
        board = build_leaderboard(store, n_boot=200)
        assert sorted(e.reward.mean for e in board.entries) == [0.0, 1.0]
        with pytest.raises(RunConflictError, match="another result key"):
            store.add_run(RunRecord(hotter, "eval-1"), episodes(1))


def test_schema_from_the_future_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "lb.sqlite"
    ResultStore(db).close()
    raw = sqlite3.connect(db)
    raw.execute("INSERT INTO schema_version VALUES (99, 'x', 'future')")
    raw.commit()
    raw.close()
    with pytest.raises(SchemaTooNewError, match="99"):
        ResultStore(db)


def test_urls(tmp_path: Path) -> None:
    assert parse_url("sqlite:///rel/lb.db").target == "rel/lb.db"
    assert parse_url(f"sqlite:///{tmp_path}/lb.db").target == f"{tmp_path}/lb.db"
    assert parse_url(tmp_path / "x.db").target == str(tmp_path / "x.db")
    assert parse_url("postgresql://u@h/db").backend == "postgresql"
    with pytest.raises(StoreURLError, match="mysql"):
        parse_url("mysql://h/db")
    nested = tmp_path / "a" / "b" / "lb.sqlite"
    ResultStore(nested).close()
    assert nested.exists()
    if importlib.util.find_spec("psycopg") is None:
        with pytest.raises(MissingDriverError, match="psycopg"):
            ResultStore("postgresql://nobody@127.0.0.1:1/none")


def test_secret_names() -> None:
    for name in (
        "api_key",
        "OPENAI_API_KEY",
        "apiKey",
        "access_token",
        "authToken",
        "password",
        "client-secret",
    ):
        assert is_secret_name(name), name
    for name in ("max_tokens", "tokenizer", "num_tokens", "temperature", "keyword", "top_p"):
        assert not is_secret_name(name), name


def test_secrets_never_reach_the_store_or_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = "tml-LIVEKEY-0123456789abcdef"
    monkeypatch.setenv("TINKER_API_KEY", live)
    openai_like = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"
    key = make_key(model=f"m-{live}", sampling={"temperature": 0.5, "api_key": openai_like})
    config = {
        "api_key": "plain-value-1",
        "nested": {"authToken": "plain-value-2", "max_tokens": 32, "headers": [f"Bearer {live}"]},
        "note": f"the key is {openai_like}",
    }
    metrics: dict[str, str | int] = {"echo": f"model said {live}", "password": "hunter2hunter2", "turns": 3}
    db = tmp_path / "lb.sqlite"
    with ResultStore(db) as store:
        ep = EpisodeResult(seed=0, reward=1.0, metrics=metrics, transcript_ref=f"log.eval#{live}")
        store.add_run(RunRecord(key, "eval-1", log_path=f"/logs/{openai_like}.eval", config=config), [ep])
        (run,) = store.runs()
        assert run.config["nested"]["max_tokens"] == 32  # non-secrets survive
        assert run.config["api_key"] == REDACTED and run.config["nested"]["authToken"] == REDACTED
        assert store.episodes()[0].episode.metrics["turns"] == 3
        report = write_html(tmp_path / "site", build_leaderboard(store, n_boot=50))
    blob = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for secret in (live, openai_like, "plain-value-1", "plain-value-2", "hunter2hunter2"):
        assert secret.encode() not in blob, secret
    assert REDACTED in report.index.read_text()
    assert redact_text("no secrets here, max_tokens=5") == "no secrets here, max_tokens=5"


def test_working_directory_and_paths_are_not_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15.6: PWD names the working directory, not a password; log paths under it must survive."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("OLDPWD", str(tmp_path.parent))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "creds.json"))
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789abcdef")
    log = str(tmp_path / "runs" / "demo" / "bench" / "a.eval")
    assert redact_text(log) == log
    assert redact_text(f"sent tok-0123456789abcdef from {tmp_path}") == f"sent {REDACTED} from {tmp_path}"
    with ResultStore(tmp_path / "lb.sqlite") as store:
        ep = EpisodeResult(seed=0, reward=1.0, transcript_ref=f"{log}#1")
        store.add_run(RunRecord(make_key(), "eval-1", log_path=log, config={"cwd": str(tmp_path)}), [ep])
        (run,) = store.runs()
        assert run.log_path == log and run.config == {"cwd": str(tmp_path)}
        assert store.episodes()[0].episode.transcript_ref == f"{log}#1"


def test_file_identity(tmp_path: Path) -> None:
    a, b = tmp_path / "a.eval", tmp_path / "b.eval"
    a.write_bytes(b"log one")
    b.write_bytes(b"log one")
    assert file_identity(a) == file_identity(b) and file_identity(a).startswith("sha256:")
    b.write_bytes(b"log two")
    assert file_identity(a) != file_identity(b)


_WRITERS = 8
_RUNS_EACH = 5
_EPISODES_EACH = 20


def _writer(db: str, index: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()  # every process opens and writes at the same moment, fresh file included
    with ResultStore(db) as store:
        for j in range(_RUNS_EACH):
            key = make_key(model=f"model-{index}", seeds=range(_EPISODES_EACH))
            store.add_run(RunRecord(key, f"p{index}-r{j}"), episodes(_EPISODES_EACH, reward=j / 10))
        # Every process imports the same shared log: it must land exactly once.
        store.add_run(
            RunRecord(make_key(model="shared", seeds=range(_EPISODES_EACH)), "shared"), episodes(20)
        )
        players = (f"model-{index}", "fixed-opponent")
        store.add_matches(
            [MatchResult(f"g{index}-{k}", "tictactoe-v0", players, (k % 2, 1 - k % 2)) for k in range(3)]
        )


def test_eight_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(_WRITERS)
    procs = [ctx.Process(target=_writer, args=(db, i, barrier)) for i in range(_WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * _WRITERS
    with ResultStore(db) as store:
        assert store.integrity_check() == "ok"
        runs = store.runs()
        assert len(runs) == _WRITERS * _RUNS_EACH + 1
        assert all(r.n_episodes == _EPISODES_EACH for r in runs)
        assert len(store.episodes()) == (_WRITERS * _RUNS_EACH + 1) * _EPISODES_EACH
        assert len(store.matches()) == _WRITERS * 3
        assert len(store.keys()) == _WRITERS + 1
