"""``envsuite bench --rubric FILE --judge MODEL --judge-cache FILE``: every episode's final reply scored by a
rubric in both runners, the rubric and judge in the result key, and cached verdicts asked of no judge.

Real benches: the tiny model plays ``arithmetic`` and judges the rubric's judge criterion, into SQLite
stores in ``tmp_path``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import envsuite.evals._rubric as rubric_module
from envsuite.cli import main
from envsuite.errors import UsageError
from envsuite.evals import BenchConfig
from envsuite.evals._rubric import RubricSettings, final_exchange
from envsuite.evals._task import new_result, score_episode
from envsuite.evals.bench._rescore import RUBRIC_REFUSAL, rescore
from envsuite.evals.bench._rows import sampling_settings
from envsuite.leaderboard import ResultStore
from envsuite.rubrics import JudgeCriterion, RegexCriterion, Rubric
from tests.conftest import TEST_MODEL

RUBRIC = Rubric(
    "terse-and-judged",
    (
        RegexCriterion("no_digits", r"\d", negate=True),
        JudgeCriterion("on_topic", "Does the response answer the question?"),
    ),
)
CODE_ONLY = Rubric("says-something", (RegexCriterion("nonempty", r"\S"),))


def _bench(tmp_path: Path, runner: str, db: Path, *extra: str) -> int:
    argv = ["bench", "--model", TEST_MODEL, "--envs", "arithmetic", "--episodes", "2", "--max-tokens", "8"]
    argv += ["--runner", runner, "--db", str(db), "--log-dir", str(tmp_path / "logs" / runner), *extra]
    return main(argv)


def _episodes(db: Path) -> list[tuple[dict[str, object], int, float, dict[str, float]]]:
    with ResultStore(str(db)) as store:
        rows = [
            (json.loads(e.key.sampling), e.episode.seed, e.episode.reward, dict(e.episode.metrics))
            for e in store.episodes()
        ]
    return sorted(rows, key=repr)


def test_a_rubric_scores_both_runners_episodes_under_a_key_of_its_own_and_cached_verdicts_cost_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cache = tmp_path / "rubric.json", tmp_path / "judgments.sqlite"
    path.write_text(RUBRIC.canonical_json())
    rubric_flags = ("--rubric", str(path), "--judge", TEST_MODEL, "--judge-cache", str(cache))
    monkeypatch.setattr(rubric_module, "_JUDGES", {})
    direct_db, inspect_db = tmp_path / "direct.sqlite", tmp_path / "inspect.sqlite"
    assert _bench(tmp_path, "direct", direct_db, *rubric_flags) == 0
    judge = rubric_module._JUDGES[TEST_MODEL, str(cache)]
    assert judge.stats.calls == 2  # one verdict per episode

    scored = _episodes(direct_db)
    assert len(scored) == 2
    for sampling, _, _, metrics in scored:
        assert sampling["rubric"] == RUBRIC.identity() and sampling["judge"] == TEST_MODEL
        assert {"rubric/no_digits", "rubric/on_topic", "rubric/reward"} <= metrics.keys()
        assert 0.0 <= metrics["rubric/reward"] <= 1.0
    with ResultStore(str(direct_db)) as store:
        (run,) = store.runs()
    assert Rubric.from_dict(dict(run.config["rubric"])) == RUBRIC

    # The Inspect runner, with a judge loaded afresh from the same cache: the same rows, no judge call.
    monkeypatch.setattr(rubric_module, "_JUDGES", {})
    assert _bench(tmp_path, "inspect", inspect_db, *rubric_flags) == 0
    rejudge = rubric_module._JUDGES[TEST_MODEL, str(cache)]
    assert rejudge.stats.calls == 0 and rejudge.stats.cached == 2
    assert _episodes(inspect_db) == scored

    # A plain bench of the same env is a key of its own, exactly as before rubrics existed; it plays the
    # same episodes, so each rubric-scored reward is the plain one plus the rubric's.
    assert _bench(tmp_path, "direct", direct_db) == 0
    with ResultStore(str(direct_db)) as store:
        keys = store.keys(["arithmetic"])
    assert len(keys) == 2
    plain = [row for row in _episodes(direct_db) if "rubric" not in row[0]]
    assert [row[0] for row in plain] == [{"max_tokens": 8, "seed": 0, "temperature": 0.7}] * 2
    env_reward = {seed: reward for _, seed, reward, _ in plain}
    for _, seed, reward, metrics in scored:
        assert reward == pytest.approx(env_reward[seed] + metrics["rubric/reward"])


def test_the_key_names_rubric_and_judge_only_when_a_bench_has_a_rubric() -> None:
    plain = BenchConfig(model=TEST_MODEL, env_ids=("arithmetic",))
    assert sampling_settings(plain) == {"max_tokens": 256, "temperature": 0.7, "seed": 0}
    judged = BenchConfig(model=TEST_MODEL, env_ids=("arithmetic",), rubric=RUBRIC.to_dict(), judge="j")
    assert sampling_settings(judged) == sampling_settings(plain) | {"rubric": RUBRIC.identity(), "judge": "j"}
    # A code-only rubric has no judge to tell apart; the cache changes no result, so neither key nor logs.
    code = BenchConfig(model=TEST_MODEL, rubric=CODE_ONLY.to_dict(), judge="j", judge_cache="c.sqlite")
    assert code.rubric_key() == {"rubric": CODE_ONLY.identity(), "judge": "none"}
    assert code.log_dir() == BenchConfig(model=TEST_MODEL, rubric=CODE_ONLY.to_dict(), judge="j").log_dir()
    assert len({plain.log_dir(), judged.log_dir(), code.log_dir()}) == 3
    with pytest.raises(UsageError, match="not a rubric"):
        BenchConfig(model=TEST_MODEL, rubric={"name": "no criteria"})


def test_rescore_refuses_to_rejudge_rubric_scored_rows() -> None:
    with pytest.raises(UsageError, match="does not re-judge rubric-scored rows yet"):
        rescore(BenchConfig(model=TEST_MODEL, env_ids=("arithmetic",), rubric=CODE_ONLY.to_dict()))
    assert "--rescore" in RUBRIC_REFUSAL


async def test_a_missing_reply_scores_as_an_empty_one_and_the_prompt_is_the_last_before_the_reply() -> None:
    result = new_result()
    await score_episode(RubricSettings(CODE_ONLY.to_dict()), result, [])
    assert result["reward"] == 0.0 and result["metrics"] == {"rubric/nonempty": 0.0, "rubric/reward": 0.0}
    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "tool", "content": "t"},
        {"role": "assistant", "content": "final"},
        {"role": "user", "content": "feedback after the reply"},
    ]
    scored = final_exchange(conversation)
    assert (scored.prompt, scored.reply) == ("t", "final")
