"""`envsuite bench`'s two runners: Inspect's eval set and the direct runner (envsuite plays, Inspect logs).

Everything here is real: the tiny model through the local sampler, real envs, real Inspect logs read back
with Inspect's own reader, and a real SQLite store. The direct runner must give the same episodes as the
Inspect runner (same tokens for the same prompt and seed), journal every finished episode so a rerun
plays only what is missing, and keep failed episodes out of the store until they are played again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import inspect_ai._util._async as inspect_async
import pytest
from inspect_ai.log import EvalLog, read_eval_log

import envsuite.evals.bench._rows as rows_module
import envsuite.evals.direct._runner as direct_module
from envsuite import register
from envsuite.evals import BenchConfig, run_bench
from envsuite.leaderboard import ResultStore
from envsuite.registration import registry
from tests.conftest import TEST_MODEL


def _config(tmp_path: Path, *env_ids: str, **settings: Any) -> BenchConfig:
    defaults: dict[str, Any] = {"model": TEST_MODEL, "display": "none", "episodes": 3, "max_tokens": 8}
    return BenchConfig(
        env_ids=env_ids,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        **(defaults | settings),
    )


def _episodes(log: EvalLog) -> dict[Any, tuple[Any, ...]]:
    """What a log says each episode was: its messages, score, score metadata and answer."""
    episodes = {}
    for sample in log.samples or []:
        score = (sample.scores or {})["env_reward"]
        messages = [(m.role, m.text) for m in sample.messages]
        episodes[sample.id] = (messages, score.value, score.metadata, score.answer, sample.metadata)
    return episodes


def _stored(db: Path) -> list[tuple[int, float]]:
    store = ResultStore(str(db))
    try:
        return sorted((e.episode.seed, e.episode.reward) for e in store.episodes())
    finally:
        store.close()


def _rows(db: Path) -> dict[str, list[Any]]:
    """Every row a store holds, less what names the run itself (its eval id, log path and times)."""
    with ResultStore(str(db)) as store:
        runs = [(r.key, dict(r.config), r.reward_range, r.n_episodes) for r in store.runs()]
        episodes = [
            (e.key.key_id, e.episode.seed, e.episode.epoch, e.episode.reward, e.episode.success,
             dict(e.episode.metrics), str(e.episode.transcript_ref).rsplit("#", 1)[1])
            for e in store.episodes()
        ]  # fmt: skip
        matches = [(m.match_id.split(":", 1)[1], m.env_id, m.players, m.ranks) for m in store.matches()]
    return {"runs": sorted(runs, key=repr), "episodes": sorted(episodes), "matches": sorted(matches)}


class _ReenteredLoop(RuntimeError):
    pass


def _refuse_reentering(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make Inspect's sync API fail where it would re-enter a running event loop (nest_asyncio), the way
    the whole-catalog bench crashed (issue 32.1); returns where it was tried."""
    tried: list[str] = []

    def refuse() -> None:
        import traceback

        tried.append("".join(traceback.format_stack(limit=12)))
        raise _ReenteredLoop("Inspect's synchronous API was called inside a running event loop")

    monkeypatch.setattr(inspect_async, "init_nest_asyncio", refuse)
    return tried


def test_auto_runs_envsuite_models_directly_and_other_models_through_inspect() -> None:
    assert BenchConfig(model=TEST_MODEL).resolved_runner() == "direct"
    assert BenchConfig(model="mockllm/model").resolved_runner() == "inspect"
    assert BenchConfig(model=TEST_MODEL, runner="inspect").resolved_runner() == "inspect"
    with pytest.raises(ValueError, match="envsuite models only"):
        BenchConfig(model="mockllm/model", runner="direct")
    with pytest.raises(ValueError, match="unknown runner"):
        BenchConfig(model=TEST_MODEL, runner="fast")
    # The runners keep their logs apart; an Inspect run's directory keeps the name it had before.
    assert (
        BenchConfig(model=TEST_MODEL).log_dir() != BenchConfig(model=TEST_MODEL, runner="inspect").log_dir()
    )


def test_direct_and_inspect_runners_record_the_same_episodes(tmp_path: Path) -> None:
    logs: dict[str, list[EvalLog]] = {}
    for runner in ("inspect", "direct"):
        config = _config(tmp_path / runner, "arithmetic", "tictactoe", runner=runner)
        report = run_bench(config)
        assert report.completed and report.episodes_added == 6 and report.runs_added == 2
        logs[runner] = sorted((read_eval_log(p) for p in report.log_paths), key=lambda log: log.eval.task)
    for inspect_log, direct_log in zip(logs["inspect"], logs["direct"], strict=True):
        assert direct_log.status == "success" and direct_log.eval.task == inspect_log.eval.task
        assert direct_log.eval.task_args == inspect_log.eval.task_args
        assert direct_log.eval.metadata == {**(inspect_log.eval.metadata or {}), "runner": "direct"}
        assert _episodes(direct_log) == _episodes(inspect_log)  # token for token, score for score
        assert direct_log.results is not None and inspect_log.results is not None
        for ours, theirs in zip(direct_log.results.scores, inspect_log.results.scores, strict=True):
            assert ours.name == theirs.name
            assert ours.metrics["mean"].value == pytest.approx(theirs.metrics["mean"].value)
            assert ours.metrics["stderr"].value == pytest.approx(theirs.metrics["stderr"].value)
    stored = {runner: _rows(tmp_path / runner / "board.sqlite") for runner in ("direct", "inspect")}
    assert stored["direct"] == stored["inspect"] and len(stored["direct"]["episodes"]) == 6
    assert len(stored["direct"]["matches"]) == 3  # tictactoe's episodes, as games against its opponent


@pytest.mark.parametrize("runner", ["direct", "inspect"])
def test_a_bench_never_reenters_its_event_loop_and_stores_what_it_played(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    """Issue 32.1: the direct runner wrote and read Inspect logs with Inspect's sync API from inside its
    running loop (and the Inspect runner's hooks read them inside Inspect's): nest_asyncio re-entered the
    loop, whose interrupted ``_run_once`` then popped an empty queue. Issue 31.3: the direct runner
    stores the episodes it played, never reading its own log back."""
    tried = _refuse_reentering(monkeypatch)
    if runner == "direct":

        async def no_reading(log_path: str) -> Any:
            raise AssertionError(f"the direct runner read its log {log_path} back")

        monkeypatch.setattr(rows_module, "logged_env", no_reading)
    report = run_bench(_config(tmp_path, "arithmetic", "tictactoe", episodes=2, runner=runner))
    assert tried == []
    assert report.completed and report.runs_added == 2 and report.episodes_added == 4


class _FailingSampler:
    """The real sampling call, failing (like a dropped connection) after ``ok_calls`` calls."""

    def __init__(self, real: Any, ok_calls: int) -> None:
        self.real, self.ok_calls, self.calls = real, ok_calls, 0

    async def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls > self.ok_calls:
            raise ConnectionError("the sampler went away")
        return await self.real(*args)


def test_failed_episodes_stay_out_of_the_store_and_a_rerun_plays_only_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, "arithmetic", episodes=5, max_samples=1)  # one at a time: a fixed order
    real = direct_module.sample
    failing = _FailingSampler(real, ok_calls=2)
    monkeypatch.setattr(direct_module, "sample", failing)
    first = run_bench(config)
    assert not first.completed and first.episodes_added == 0  # an env is stored only when whole
    (log_path,) = first.log_paths
    log = read_eval_log(log_path)
    assert log.status == "error" and log.samples is not None
    errors = [s for s in log.samples if s.error is not None]
    assert len(errors) == 3 and "the sampler went away" in errors[0].error.message  # type: ignore[union-attr]
    assert failing.calls == 2 + 3 * 2  # each failed episode was tried twice
    journal = next(Path(first.log_dir).glob("direct_*.jsonl"))
    journaled = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    assert len(journaled) == 2

    counting = _FailingSampler(real, ok_calls=10**6)
    monkeypatch.setattr(direct_module, "sample", counting)
    second = run_bench(config)
    assert second.completed and second.episodes_added == 5 and counting.calls == 3
    assert second.log_paths == first.log_paths  # one env, one run: the same log, now complete
    log = read_eval_log(second.log_paths[0])
    assert log.status == "success" and len(log.samples or []) == 5
    kept = {s.metadata["seed"]: s.started_at for s in log.samples or []}
    assert all(kept[r["seed"]] == r["started_at"] for r in journaled)  # the journaled ones were not replayed
    assert not journal.exists()

    third = run_bench(config)
    assert third.completed and third.episodes_added == 0 and counting.calls == 3
    assert len(_stored(tmp_path / "board.sqlite")) == 5


def test_a_journal_line_cut_by_a_kill_is_played_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, "arithmetic", episodes=3, max_samples=1)
    monkeypatch.setattr(direct_module, "sample", _FailingSampler(direct_module.sample, ok_calls=2))
    first = run_bench(config)
    journal = next(Path(first.log_dir).glob("direct_*.jsonl"))
    lines = journal.read_text().splitlines()
    assert len(lines) == 3  # the header and two episodes
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-write
    counting = _FailingSampler(direct_module.sample.real, ok_calls=10**6)  # type: ignore[attr-defined]
    monkeypatch.setattr(direct_module, "sample", counting)
    second = run_bench(config)
    assert second.completed and second.episodes_added == 3 and counting.calls == 2


def test_an_episode_past_its_time_bound_is_a_scored_rollout_timeout_in_the_direct_runner(
    tmp_path: Path,
) -> None:
    register("scratch/endless-v0", "tests.support.flaky_env:EndlessEnv", reward_range=(0.0, 1000.0))
    try:
        report = run_bench(
            _config(tmp_path, "scratch/endless", episodes=2, max_tokens=2, episode_timeout_s=2)
        )
    finally:
        registry.unregister("scratch/endless-v0")
    assert report.completed and report.episodes_added == 2
    log = read_eval_log(report.log_paths[0])
    for sample in log.samples or []:
        score = (sample.scores or {})["env_reward"]
        assert score.metadata is not None and score.metadata["stop_reason"] == "rollout_timeout"
        assert 1.0 <= score.value["reward"] <= 12.0  # type: ignore[index]  (turns done at 0.2 s each)
        assert sample.messages  # the conversation up to the cut is kept


def test_a_terminal_bench_shows_one_bar_with_the_time_left_and_a_line_per_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envsuite.cli import build_parser

    report = run_bench(_config(tmp_path, "arithmetic", "tictactoe", episodes=2, display="full"))
    assert report.completed and report.episodes_added == 4
    shown = " ".join(capsys.readouterr().out.split())  # rich folds long lines to the terminal's width
    assert "2 env(s), 4 episode(s) to play" in shown and "4/4 episodes" in shown and "left" in shown
    assert "arithmetic-v0: finished in" in shown and "tictactoe-v0: finished in" in shown
    assert "[2/2 envs, 4/4 episodes" in shown
    args = build_parser().parse_args(["bench", "--model", TEST_MODEL, "--runner", "inspect"])
    assert args.runner == "inspect"
    assert build_parser().parse_args(["bench", "--model", TEST_MODEL]).runner == "auto"


@pytest.mark.parametrize("runner", ["direct", "inspect"])
async def test_a_bench_runs_from_inside_a_running_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    """A notebook calls ``run_bench`` with an event loop already running; the bench runs on a thread of
    its own rather than failing in ``asyncio.run`` or re-entering the notebook's loop."""
    tried = _refuse_reentering(monkeypatch)
    report = run_bench(_config(tmp_path, "arithmetic", episodes=2, runner=runner))
    assert tried == [] and report.completed and report.episodes_added == 2


def test_the_whole_catalog_benches_through_the_envsuite_command(tmp_path: Path) -> None:
    """Issue 32.1: `envsuite bench --model tiny-random` (every available env) crashed with ``pop from an
    empty deque`` after a few envs. Run the way the command runs (the console script, which restarts
    under jemalloc), with one short episode per env."""
    envsuite_cli = Path(sys.executable).parent / "envsuite"
    db = tmp_path / "board.sqlite"
    done = subprocess.run(
        [str(envsuite_cli), "bench", "--model", TEST_MODEL, "--episodes", "1", "--max-tokens", "16",
         "--log-dir", str(tmp_path / "logs"), "--db", str(db)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    available = BenchConfig(model=TEST_MODEL).resolved_env_ids()
    assert len(available) > 50
    with ResultStore(str(db)) as store:
        assert sorted({k.versioned_env_id for k in store.keys()}) == sorted(available)  # noqa: SIM118
        assert len(store.episodes()) == len(available)


def test_an_env_that_breaks_the_bench_is_reported_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing env is reported and skipped, never the end of the run; a rerun plays only it."""
    register("scratch/unrecordable-v0", "tests.support.toy_envs:UnrecordableEnv", reward_range=(0.0, 1.0))
    try:
        config = _config(tmp_path, "scratch/unrecordable", "arithmetic", episodes=2, display="lines")
        report = run_bench(config)
        assert not report.completed and set(report.failed_envs) == {"scratch/unrecordable-v0"}
        assert "TypeError" in report.failed_envs["scratch/unrecordable-v0"]
        out = " ".join(capsys.readouterr().out.split())
        assert "scratch/unrecordable-v0: ended with status error: TypeError" in out
        assert "arithmetic-v0: finished in" in out and "[2/2 envs, 2/4 episodes" in out
        assert {seed for seed, _ in _stored(Path(config.db or ""))} and len(
            _stored(Path(config.db or ""))
        ) == 2
        again = run_bench(config)
        out = " ".join(capsys.readouterr().out.split())
        assert "1 env(s), 2 episode(s) to play (an earlier run of this bench: 1 env(s) finished)" in out
        assert set(again.failed_envs) == {"scratch/unrecordable-v0"} and again.episodes_added == 0
    finally:
        registry.unregister("scratch/unrecordable-v0")


def test_progress_lines_say_how_far_the_whole_run_is_and_the_time_left() -> None:
    from envsuite.evals.bench._progress import BenchSession, clock

    said: list[str] = []
    session = BenchSession(label="m", say=said.append)
    session.plan(2, 12, resumed=4, finished_envs=1)
    assert (
        said[-1]
        == "m: 2 env(s), 12 episode(s) to play (an earlier run of this bench: 1 env(s) finished, 4 episode(s) played)"
    )
    session.task_started("a", "env-a", 8)
    session.task_started("b", "env-b", 8)
    for _ in range(4):
        session.sample_ended("a", 1.0, resumed=True)  # resumed: counts for the env, not the run's rate
    session.episode_started("a")
    for _ in range(4):
        session.sample_ended("a", 0.0)
    assert said[-1].startswith("m on env-a: 8/8 episodes, mean reward +0.500")
    assert session.episodes_played == 4 and session.eta_s() is not None
    session.task_ended("a", "a.json")
    assert (
        "m on env-a: finished in" in said[-1]
        and "[1/2 envs, 4/12 episodes" in said[-1]
        and "left]" in said[-1]
    )
    session.task_failed("b", "error")
    assert session.failed == {"env-b": "error"} and "left]" not in said[-1]
    assert [clock(s) for s in (5, 65, 3725)] == ["0:05", "1:05", "1:02:05"]
