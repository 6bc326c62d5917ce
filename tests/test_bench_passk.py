"""`envsuite bench --samples K`: K plays per episode, pass@k with intervals, never pooled across K.

Real parts throughout: a real SQLite store, the tiny model through the local sampler in both bench
runners, Inspect logs read back with Inspect's own reader, and the ``envsuite`` command itself.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import read_eval_log

from envsuite import register
from envsuite.cli import main
from envsuite.evals import BenchConfig, run_bench
from envsuite.leaderboard import (
    EpisodeResult,
    KeySummary,
    ResultKey,
    ResultStore,
    RunRecord,
    board_dict,
    build_leaderboard,
    write_html,
)
from envsuite.registration import registry
from envsuite.stats import reported_ks
from tests.conftest import TEST_MODEL


def _closed_form(counts: list[int], n: int, k: int) -> float:
    """Mean over problems of 1 - C(n-c, k) / C(n, k), exactly."""
    return float(sum(1 - Fraction(math.comb(n - c, k), math.comb(n, k)) for c in counts) / len(counts))


def _key(samples: int, model: str = "m", seeds: range = range(5)) -> ResultKey:
    sampling: dict[str, Any] = {"temperature": 0.7}
    if samples > 1:
        sampling["samples"] = samples
    return ResultKey.create(
        model=model,
        env_id="arithmetic-v0",
        renderer="chatml",
        sampling=sampling,
        seeds=seeds,
        package_version="0.1.0",
    )


def _plays(counts: list[int], n: int) -> list[EpisodeResult]:
    """Problem ``seed`` played ``n`` times, its first ``counts[seed]`` plays successes."""
    return [
        EpisodeResult(seed=seed, epoch=epoch, reward=float(epoch <= c), success=epoch <= c)
        for seed, c in enumerate(counts)
        for epoch in range(1, n + 1)
    ]


def test_pass_at_k_of_stored_plays_is_the_closed_form_averaged_over_problems(tmp_path: Path) -> None:
    counts, n = [0, 1, 2, 4, 3], 4
    with ResultStore(tmp_path / "lb.sqlite") as store:
        store.add_run(RunRecord(_key(n), "r4"), _plays(counts, n))
        (entry,) = build_leaderboard(store, n_boot=500).entries
    assert [v.k for v in entry.pass_at.values] == [1, 2, 4] and entry.pass_at.withheld is None
    for value in entry.pass_at.values:
        assert value.n == n and value.pass_at_k.n == len(counts)  # n plays each, CI over the 5 problems
        assert value.pass_at_k.mean == pytest.approx(_closed_form(counts, n, value.k), abs=1e-12)
        hat = sum(Fraction(math.comb(c, value.k), math.comb(n, value.k)) for c in counts) / len(counts)
        assert value.pass_hat_k.mean == pytest.approx(float(hat), abs=1e-12)
        assert value.pass_at_k.lo < value.pass_at_k.mean < value.pass_at_k.hi
    # pass@1 is the mean success; pass@k grows with k; the same k resample the same problems.
    assert entry.success is not None and entry.pass_at.values[0].pass_at_k.mean == pytest.approx(
        entry.success.mean
    )
    means = [v.pass_at_k.mean for v in entry.pass_at.values]
    assert means == sorted(means)
    assert _closed_form([2], 4, 2) == pytest.approx(5 / 6)  # the worked example in docs/evals.md


def test_reported_ks_are_one_the_powers_of_two_and_k() -> None:
    assert reported_ks(1) == (1,)
    assert reported_ks(3) == (1, 2, 3)
    assert reported_ks(8) == (1, 2, 4, 8)
    assert reported_ks(10) == (1, 2, 4, 8, 10)
    with pytest.raises(ValueError):
        reported_ks(0)


def test_results_of_different_k_are_never_pooled(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "lb.sqlite") as store:
        store.add_run(RunRecord(_key(4), "k4"), _plays([1, 2, 0, 4, 4], 4))
        store.add_run(RunRecord(_key(8), "k8"), _plays([1, 2, 0, 8, 8], 8))
        # A run of 8 plays cannot hide under the key of 4 (its plays 5..8 would pool two settings).
        with pytest.raises(ValueError, match="holds epoch"):
            store.add_run(RunRecord(_key(4), "k4-wrong"), _plays([1, 1, 1, 1, 1], 8))
        board = build_leaderboard(store, n_boot=200)
    by_k = {entry.key.samples: entry for entry in board.entries}
    assert sorted(by_k) == [4, 8] and len({e.key.key_id for e in board.entries}) == 2
    assert [v.k for v in by_k[4].pass_at.values] == [1, 2, 4]
    assert [v.k for v in by_k[8].pass_at.values] == [1, 2, 4, 8]
    assert {v.n for v in by_k[4].pass_at.values} == {4} and {v.n for v in by_k[8].pass_at.values} == {8}
    p2 = by_k[8].pass_at.at(2)
    assert p2 is not None and p2.pass_at_k.mean == pytest.approx(_closed_form([1, 2, 0, 8, 8], 8, 2))
    assert len(board.overall) == 2  # two entrants: K is part of the sampling settings
    exported = {e["sampling"].get("samples"): e["pass_at_k"] for e in board_dict(board)["entries"]}
    assert [p["k"] for p in exported[8]] == [1, 2, 4, 8] and exported[4][0]["n"] == 4


def test_a_key_whose_problems_have_different_plays_withholds_pass_at_k(tmp_path: Path) -> None:
    plays = [e for e in _plays([1, 2, 3], 3) if (e.seed, e.epoch) != (2, 3)]  # one play missing
    with ResultStore(tmp_path / "lb.sqlite") as store:
        store.add_run(RunRecord(_key(3, seeds=range(3)), "r"), plays)
        (entry,) = build_leaderboard(store, n_boot=100).entries
    assert entry.pass_at.values == ()
    assert (
        entry.pass_at.withheld is not None and "different numbers of plays (2, 3)" in entry.pass_at.withheld
    )


def test_one_play_per_episode_keys_and_rows_are_unchanged(tmp_path: Path) -> None:
    config = BenchConfig(
        model=TEST_MODEL, env_ids=("arithmetic_easy",), episodes=2, max_tokens=8, log_root="L"
    )
    # The log directory benches wrote before --samples existed (computed with the code before it).
    assert config.log_dir() == Path("L/tiny-random-a380e76cce00")
    assert BenchConfig(**{**config.__dict__, "samples": 2}).log_dir() != config.log_dir()
    with ResultStore(tmp_path / "lb.sqlite") as store:
        store.add_run(RunRecord(_key(1), "r1"), _plays([0, 1, 1, 0, 1], 1))
        (entry,) = build_leaderboard(store, n_boot=100).entries
        assert entry.key.sampling == '{"temperature":0.7}' and entry.pass_at.values == ()
        assert "pass@" not in json.dumps(
            board_dict(build_leaderboard(store, n_boot=100))["entries"][0]["sampling"]
        )


def _per_problem_successes(log_paths: list[str]) -> dict[int, list[bool]]:
    """Each episode seed's plays as the Inspect logs score them (read with Inspect's reader)."""
    found: dict[int, list[bool]] = defaultdict(list)
    for path in log_paths:
        for sample in read_eval_log(path).samples or []:
            value = (sample.scores or {})["env_reward"].value
            assert isinstance(value, dict)
            found[int((sample.metadata or {})["seed"])].append(float(value["success"]) >= 0.5)
    return found


def _only_entry(db: Path) -> KeySummary:
    with ResultStore(str(db)) as store:
        (entry,) = build_leaderboard(store, n_boot=300).entries
    return entry


def test_both_runners_play_each_episode_k_times_with_seeds_of_their_own(tmp_path: Path) -> None:
    register("scratch/coin-v0", "tests.support.flaky_env:CoinEnv", reward_range=(0.0, 1.0))
    try:
        rows = {}
        for runner in ("direct", "inspect"):
            config = BenchConfig(
                model=TEST_MODEL,
                env_ids=("scratch/coin",),
                episodes=4,
                samples=3,
                max_tokens=6,
                temperature=1.0,
                display="none",
                runner=runner,
                log_root=str(tmp_path / runner / "logs"),
                db=str(tmp_path / runner / "lb.sqlite"),
            )
            report = run_bench(config)
            assert report.completed and report.episodes_added == 12
            log = read_eval_log(report.log_paths[0])
            assert log.eval.config.epochs == 3 and log.eval.dataset.samples == 4
            replies = defaultdict(set)
            for sample in log.samples or []:
                replies[sample.id].add(sample.output.completion)
            assert any(len(texts) > 1 for texts in replies.values())  # plays sample with their own seeds
            entry = _only_entry(tmp_path / runner / "lb.sqlite")
            assert json.loads(entry.key.sampling)["samples"] == 3 and entry.n_episodes == 12
            successes = _per_problem_successes(report.log_paths)
            counts = [sum(plays) for plays in successes.values()]
            assert {len(plays) for plays in successes.values()} == {3}
            assert 0 < sum(counts) < 12  # varied outcomes: the closed form is not trivially 0 or 1
            for value in entry.pass_at.values:
                assert value.n == 3
                assert value.pass_at_k.mean == pytest.approx(_closed_form(counts, 3, value.k), abs=1e-12)
            rows[runner] = sorted(
                (e.seed, e.epoch, e.reward) for e in _episodes(tmp_path / runner / "lb.sqlite")
            )
        assert rows["direct"] == rows["inspect"]  # the same plays, token for token, in either runner
    finally:
        registry.unregister("scratch/coin-v0")


def _episodes(db: Path) -> list[EpisodeResult]:
    with ResultStore(str(db)) as store:
        return [e.episode for e in store.episodes()]


def test_bench_samples_through_the_command_stores_n_plays_and_shows_pass_at_k(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # wide enough for the table layout
    db = tmp_path / "lb.sqlite"
    args = ["--envs", "arithmetic_easy", "--episodes", "2", "--samples", "3", "--max-tokens", "8"]
    code = main(["bench", "--model", TEST_MODEL, *args, "--db", str(db), "--log-dir", str(tmp_path / "logs")])
    bench_out = capsys.readouterr().out
    assert code == 0
    episodes = _episodes(db)
    assert (
        sorted((e.seed, e.epoch) for e in episodes)
        == sorted((seed, epoch) for seed in {e.seed for e in episodes} for epoch in (1, 2, 3))
        and len(episodes) == 6
    )
    entry = _only_entry(db)
    assert [(v.k, v.n) for v in entry.pass_at.values] == [(1, 3), (2, 3), (3, 3)]
    assert main(["leaderboard", "--db", str(db)]) == 0
    board_out = capsys.readouterr().out
    for out in (bench_out, board_out):
        assert all(f"pass@{k}" in out for k in (1, 2, 3)) and "samples=3" in out and "n=3" in out


def test_the_page_shows_pass_at_k_per_result_row_and_on_the_model_page(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "lb.sqlite") as store:
        store.add_run(RunRecord(_key(4), "k4"), _plays([1, 2, 0, 4, 4], 4))
        store.add_run(RunRecord(_key(1, model="single"), "k1"), _plays([1, 0, 0, 1, 1], 1))
        board = build_leaderboard(store, n_boot=100)
    report = write_html(tmp_path / "site", board, viewer=False)
    index = Path(report.index).read_text(encoding="utf-8")
    assert all(f"pass@{k}</th>" in index for k in (1, 2, 4)) and "n=4" in index
    p2 = board.entries[[e.key.samples for e in board.entries].index(4)].pass_at.at(2)
    assert p2 is not None and f"{p2.pass_at_k.mean:.3f}" in index
    pages = {model: path.read_text(encoding="utf-8") for model, path in report.model_pages.items()}
    assert "pass@4" in pages["m"] and "n=4" in pages["m"]
    assert "pass@" not in pages["single"]  # one play per episode: no pass@k columns
