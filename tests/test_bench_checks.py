"""``envsuite bench --contamination`` and ``--rescore`` against a real bench on an Inspect task."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from envsuite.adapters.inspect_tasks import load_task
from envsuite.evals import BenchConfig, run_bench
from envsuite.evals.bench._contamination import NGRAM, contamination, eval_items
from envsuite.evals.bench._rescore import rescore
from envsuite.leaderboard import ResultStore
from tests.conftest import TEST_MODEL

ARITH = "inspect:tests.fixtures.inspect_tasks/arith"
CAPITALS = "inspect:tests.fixtures.inspect_tasks/capitals"


def test_a_planted_overlap_is_caught_and_a_clean_file_reports_zero(tmp_path: Path) -> None:
    items = eval_items(ARITH, TEST_MODEL, episodes=4, seed=0)
    planted = items[0][1]
    training = tmp_path / "train.jsonl"
    rows = [
        {"text": "Unrelated prose about rivers and mountains."},
        {"messages": [{"content": planted.upper()}]},
    ]
    training.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    clean = tmp_path / "clean.txt"
    clean.write_text("Unrelated prose about rivers and mountains.\nWhat is the sum of things?\n")

    (dirty,) = contamination(training, [ARITH], model=TEST_MODEL, episodes=4, seed=0)
    assert dirty.contaminated >= 1 and dirty.worst[0].text == planted  # case and punctuation do not hide it
    assert all(item.text == planted for item in dirty.worst)  # the other sums are not in the file
    reports = contamination(clean, [ARITH, CAPITALS], model=TEST_MODEL, episodes=4, seed=0)
    assert [(r.contaminated, r.fraction) for r in reports] == [(0, 0.0), (0, 0.0)]
    assert NGRAM == 13


def test_rescore_lists_only_the_rows_whose_grade_changed(tmp_path: Path) -> None:
    config = BenchConfig(
        model=TEST_MODEL,
        env_ids=(ARITH,),
        episodes=3,
        max_tokens=4,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        display="none",
    )
    assert run_bench(config).completed
    with ResultStore(config.db) as store:  # the run records the data it ran on: the task's samples' hash
        assert [r.dataset_revision for r in store.runs()] == [f"sha256:{load_task(ARITH[8:]).dataset_hash}"]
    assert rescore(config) == []  # today's grader agrees with every stored row
    # Plant a row an older grader scored differently: its stored reward is not what today's pays.
    with sqlite3.connect(tmp_path / "board.sqlite") as db:
        (seed, old) = db.execute("SELECT seed, reward FROM episodes ORDER BY seed LIMIT 1").fetchone()
        db.execute("UPDATE episodes SET reward = ? WHERE seed = ?", (1.0 - old, seed))
    (change,) = rescore(config)
    assert (change.env_id, change.seed, change.old, change.new) == (
        ARITH,
        seed,
        pytest.approx(1.0 - old),
        old,
    )


def test_rows_judged_by_a_grader_model_name_it_as_their_partner(tmp_path: Path) -> None:
    graded = "inspect:tests.fixtures.inspect_tasks/graded"
    config = BenchConfig(
        model=TEST_MODEL,
        env_ids=(graded,),
        episodes=2,
        max_tokens=4,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        display="none",
    )
    assert run_bench(config).completed
    with ResultStore(config.db) as store:  # another grader would be another key: rows never pool
        keys = store.keys()
    assert [(k.env_id, k.partner) for k in keys] == [(graded, f"grader:envsuite/{TEST_MODEL}")]
