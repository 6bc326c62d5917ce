"""Ranking: bootstrap intervals, the overall score, paired comparisons, ratings and the terminal view."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from envsuite.cli import main
from envsuite.leaderboard import (
    ALL_GAMES,
    EpisodeResult,
    MatchResult,
    NoPairsError,
    ResultKey,
    ResultStore,
    RunRecord,
    build_leaderboard,
    compute_ratings,
    paired_comparison,
    recompute_ratings,
    render_terminal,
)


def make_key(model: str, env_id: str = "arithmetic-v0", seeds: range = range(40)) -> ResultKey:
    return ResultKey.create(
        model=model,
        env_id=env_id,
        renderer="chatml",
        sampling={"temperature": 0.7},
        seeds=seeds,
        package_version="0.1.0",
    )


def add(store: ResultStore, key: ResultKey, rewards: list[float], run_id: str, **run: object) -> None:
    eps = [EpisodeResult(seed=s, reward=r, success=r > 0) for s, r in enumerate(rewards)]
    store.add_run(RunRecord(key, run_id, **run), eps)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    with ResultStore(tmp_path / "lb.sqlite") as opened:
        yield opened


def test_bootstrap_interval_is_seeded_and_covers_the_mean(store: ResultStore) -> None:
    rewards = [1.0 if s % 4 else -1.0 for s in range(40)]  # mean 0.5
    add(store, make_key("m"), rewards, "r1")
    (entry,) = build_leaderboard(store, n_boot=500, seed=3).entries
    assert entry.reward.mean == pytest.approx(0.5)
    assert entry.reward.lo < 0.5 < entry.reward.hi and entry.reward.n == 40
    assert entry.success is not None and entry.success.mean == pytest.approx(0.75)
    assert build_leaderboard(store, n_boot=500, seed=3).entries[0].reward == entry.reward
    assert build_leaderboard(store, n_boot=500, seed=4).entries[0].reward != entry.reward
    # Catalog range of arithmetic-v0 is (-1, 1): 0.5 normalises to 0.75.
    assert entry.normalized.mean == pytest.approx(0.75)


def test_constant_rewards_give_a_zero_width_interval(store: ResultStore) -> None:
    add(store, make_key("m"), [0.25] * 10, "r1")
    est = build_leaderboard(store, n_boot=100).entries[0].reward
    assert est.lo == est.hi == est.mean == pytest.approx(0.25)


def test_epochs_and_repeated_runs_average_within_a_sample(store: ResultStore) -> None:
    key = make_key("m", seeds=range(2))
    eps = [EpisodeResult(seed=0, reward=1.0, epoch=1), EpisodeResult(seed=0, reward=0.0, epoch=2)]
    store.add_run(RunRecord(key, "r1"), [*eps, EpisodeResult(seed=1, reward=1.0)])
    store.add_run(RunRecord(key, "r2"), [EpisodeResult(seed=1, reward=0.0)])
    (entry,) = build_leaderboard(store, n_boot=50).entries
    assert (entry.n_samples, entry.n_episodes) == (2, 4)
    assert entry.reward.mean == pytest.approx(0.5)
    assert entry.success is None  # no episode declared success


def test_overall_score_uses_reward_ranges_and_only_shared_envs(store: ResultStore) -> None:
    add(store, make_key("a"), [1.0] * 10, "a1")
    add(store, make_key("b"), [-1.0] * 10, "b1")
    game = "tictactoe-v0"
    add(store, make_key("a", game), [2.0] * 10, "a2", reward_range=(0.0, 4.0))
    add(store, make_key("b", game), [4.0] * 10, "b2", reward_range=(0.0, 4.0))
    add(store, make_key("a", "only_a-v0"), [0.0] * 10, "a3", reward_range=(0.0, 1.0))
    board = build_leaderboard(store, n_boot=100)
    assert board.shared_envs == ("arithmetic-v0", game)
    scores = {o.entrant.model: o for o in board.overall}
    # a: (1.0 + 0.5) / 2 ; b: (0.0 + 1.0) / 2 ; only_a-v0 is left out.
    assert scores["a"].score.mean == pytest.approx(0.75) and scores["a"].rank == 1
    assert scores["b"].score.mean == pytest.approx(0.5) and scores["b"].rank == 2
    filtered = build_leaderboard(store, env_ids=["tictactoe"], n_boot=100)
    assert [o.entrant.model for o in filtered.overall] == ["b", "a"]


def test_paired_comparison_matches_sample_ids(store: ResultStore) -> None:
    base = [float(s % 3) / 2 for s in range(30)]
    add(store, make_key("a", seeds=range(30)), [r + 0.5 for r in base], "a1")
    # b misses seeds 0-4 and has an extra env; only the 25 shared samples pair up.
    key_b = make_key("b", seeds=range(5, 30))
    store.add_run(RunRecord(key_b, "b1"), [EpisodeResult(seed=s, reward=base[s]) for s in range(5, 30)])
    add(store, make_key("b", "math-v0"), [0.0] * 30, "b2")
    cmp = paired_comparison(store.episodes(), "a", "b", n_boot=300)
    assert cmp.n_pairs == 25
    assert cmp.difference.mean == pytest.approx(0.5)
    assert cmp.difference.lo == pytest.approx(0.5) and cmp.difference.hi == pytest.approx(0.5)
    noisy = paired_comparison(store.episodes(), "a", make_key("a", seeds=range(30)), n_boot=300)
    assert noisy.difference.mean == 0.0
    with pytest.raises(NoPairsError, match="share no sample"):
        paired_comparison(store.episodes(), "a", "nobody")


def _games() -> list[MatchResult]:
    out = []
    for i in range(12):
        out.append(
            MatchResult(f"s-{i:02d}", "tictactoe-v0", ("strong", "weak"), (0, 1), f"2025-01-01T00:{i:02d}")
        )
        out.append(
            MatchResult.from_scores(
                f"m-{i:02d}", "nim-v0", {"strong": 1.0, "mid": 0.5, "weak": 0.5}, played_at="2025"
            )
        )
    return out


def test_ratings_rank_the_winner_first_and_are_order_independent(store: ResultStore) -> None:
    games = _games()
    assert games[1].ranks == (0, 1, 1)  # equal scores draw
    ratings = compute_ratings(games)
    assert ratings == compute_ratings(list(reversed(games)))
    for pool in ("tictactoe-v0", "nim-v0", ALL_GAMES):
        ranked = [r.player for r in ratings if r.pool == pool]
        assert ranked[0] == "strong" and ranked[-1] in ("weak", "mid")
    assert {r.matches for r in ratings if r.pool == ALL_GAMES and r.player == "strong"} == {24}
    assert store.add_matches(games) == 24
    assert store.add_matches(games) == 0  # idempotent on match id
    assert recompute_ratings(store) == ratings
    assert store.ratings() == ratings
    assert recompute_ratings(store) == store.ratings() == ratings  # recomputing replaces, never appends


def test_ratings_stay_current_as_matches_are_added(store: ResultStore) -> None:
    """Issue 15.7: a bench that only adds matches (never recomputes) must still show ratings."""
    games = _games()
    store.add_matches(games[:12])
    assert store.ratings() == compute_ratings(games[:12])
    store.add_matches(games[12:])
    assert store.ratings() == compute_ratings(games)
    assert build_leaderboard(store, n_boot=20).ratings == tuple(compute_ratings(games))
    # The stored table itself is current (a reader on another version sees it too).
    stored = store._conn.query("SELECT COUNT(*), SUM(matches) FROM ratings WHERE pool = '*'")
    assert stored[0] == (3, sum(len(g.players) for g in games))


def test_ratings_follow_the_env_filter(store: ResultStore) -> None:
    """The demo ranks with unversioned ids ("tictactoe"): its ratings must not be filtered away (15.7)."""
    games = _games()
    store.add_matches(games)
    tictactoe = [g for g in games if g.env_id == "tictactoe-v0"]
    for env_ids in (["tictactoe"], ["tictactoe-v0"], ["tictactoe", "arithmetic"]):
        ratings = build_leaderboard(store, env_ids=env_ids, n_boot=20).ratings
        assert {r.pool for r in ratings} == {"tictactoe-v0", ALL_GAMES}, env_ids
        assert list(ratings) == compute_ratings(tictactoe)  # the all-games pool covers only the chosen envs
    assert build_leaderboard(store, env_ids=["arithmetic"], n_boot=20).ratings == ()


def test_a_stale_ratings_table_is_replayed_on_read(store: ResultStore) -> None:
    """Stores written before 15.7 hold matches and no ratings: reading replays them."""
    games = _games()
    store.add_matches(games)
    store.replace_ratings([])  # what an older envsuite left behind
    assert store.ratings() == compute_ratings(games)


def test_terminal_table_and_cli(
    store: ResultStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add(store, make_key("[bold]m1[/bold]"), [1.0] * 5, "r1", log_path="logs/a.eval")
    add(store, make_key("m2"), [0.0] * 5, "r2")
    store.add_matches(_games())
    board = build_leaderboard(store, n_boot=50)
    table = render_terminal(board)
    assert table.row_count == 2
    console = Console(record=True, width=200)
    console.print(table)
    assert "[bold]m1[/bold]" in console.export_text()  # markup in a model name is shown, not applied
    out = tmp_path / "site"
    assert (
        main(["leaderboard", "--db", store.url, "--boot", "50", "--recompute-ratings", "--html", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "m2" in printed and "strong" in printed and (out / "index.html").exists()
    assert main(["leaderboard", "--db", store.url, "--env", "nothing-v9"]) == 0
    assert "no results" in capsys.readouterr().out
    assert main(["leaderboard", "--db", "mysql://x/y"]) == 2
    assert "unsupported" in capsys.readouterr().err
