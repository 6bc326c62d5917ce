"""Inspect integration: the envsuite provider, catalog tasks, partners, and `envsuite bench` with resume.

Real parts throughout: real Inspect runs, the envsuite provider over the real local sampler with the
tiny model, Inspect's offline ``mockllm`` as a stand-in third-party model, a real SQLite store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage

from envsuite.registration import registry
from evals import BenchConfig, envsuite_env, episode_seeds, run_bench
from leaderboard import ResultStore
from tests.conftest import TEST_MODEL


def test_provider_and_task_score_an_env(tmp_path: Path) -> None:
    task = envsuite_env(env_id="arithmetic", episodes=3, seed=5, max_tokens=8)
    (log,) = inspect_eval(task, model=f"envsuite/{TEST_MODEL}", log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 3
    ids = {str(s.id) for s in log.samples}
    assert all(i.startswith("arithmetic-v0@") for i in ids)
    for sample in log.samples:
        score = next(iter(sample.scores.values()))  # type: ignore[union-attr]
        assert set(score.value) == {"reward", "success"}  # type: ignore[arg-type]
        assert "stop/" in (score.explanation or "")
        assert sample.messages[-1].role == "assistant"


def _mock_reply(text: str) -> Callable[..., ModelOutput]:
    """Outputs for Inspect's offline mockllm, with usage filled in (its default counting needs tiktoken
    data from the network)."""

    def reply(*_: object) -> ModelOutput:
        output = ModelOutput.from_content(model="mockllm", content=text)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    return reply


def test_same_seeds_pair_up_across_models(tmp_path: Path) -> None:
    task = envsuite_env(env_id="arithmetic", episodes=2, seed=1, max_tokens=4)
    (a,) = inspect_eval(task, model=f"envsuite/{TEST_MODEL}", log_dir=str(tmp_path / "a"), display="none")
    (b,) = inspect_eval(
        task,
        model="mockllm/model",
        model_args={"custom_outputs": _mock_reply("7")},
        log_dir=str(tmp_path / "b"),
        display="none",
    )
    assert {s.id for s in a.samples or []} == {s.id for s in b.samples or []}


def test_any_inspect_model_can_be_evaluated_on_a_multi_turn_env(tmp_path: Path) -> None:
    task = envsuite_env(env_id="twenty_questions", episodes=1, seed=0)
    (log,) = inspect_eval(
        task,
        model="mockllm/model",
        model_args={"custom_outputs": _mock_reply("Is it an animal?")},
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    sample = (log.samples or [])[0]
    score = next(iter(sample.scores.values()))  # type: ignore[union-attr]
    assert score.metadata is not None and score.metadata["partner"].startswith("rules-v1")
    assert "stop/max_turns" in (score.explanation or "")
    assert sum(1 for m in sample.messages if m.role == "assistant") == 20


def test_an_inspect_model_can_be_the_partner(tmp_path: Path) -> None:
    # The answerer is the local tiny model, reached through Inspect's model API like any provider.
    task = envsuite_env(env_id="twenty_questions", episodes=1, seed=0, partner=f"envsuite/{TEST_MODEL}")
    (log,) = inspect_eval(
        task,
        model="mockllm/model",
        model_args={"custom_outputs": _mock_reply("Guess: dog")},
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    score = next(iter((log.samples or [])[0].scores.values()))  # type: ignore[union-attr]
    assert score.metadata is not None and f"inspect:envsuite/{TEST_MODEL}" in score.metadata["partner"]


def test_inspect_cli_finds_the_provider_through_the_entry_point(tmp_path: Path) -> None:
    inspect = Path(sys.executable).parent / "inspect"
    result = subprocess.run(
        [
            str(inspect),
            "eval",
            "envsuite/env",
            "-T",
            "env_id=arithmetic",
            "-T",
            "episodes=1",
            "-T",
            "max_tokens=4",
            "--model",
            f"envsuite/{TEST_MODEL}",
            "--log-dir",
            str(tmp_path),
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    logs = list(tmp_path.glob("*.eval"))
    assert len(logs) == 1 and read_eval_log(str(logs[0])).status == "success"


def test_bench_records_results_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    config = BenchConfig(
        model=TEST_MODEL,
        env_ids=("arithmetic", "tictactoe"),
        episodes=2,
        max_tokens=8,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        display="none",
    )
    first = run_bench(config)
    assert first.completed and first.episodes_added == 4 and first.runs_added == 2
    second = run_bench(config)
    assert second.completed and second.episodes_added == 0 and second.runs_added == 0
    store = ResultStore(config.db)
    try:
        assert {k.env_id for k in store.keys()} == {"arithmetic", "tictactoe"}  # noqa: SIM118  (ResultStore.keys() is a query, not a dict)
        assert len(store.episodes()) == 4
        assert len(store.matches()) == 2  # head-to-head games feed the ratings
    finally:
        store.close()


@pytest.fixture
def flaky_env(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    flag = tmp_path / "fail-once"
    os.environ["ENVSUITE_TEST_FLAKY_FLAG"] = str(flag)
    os.environ["ENVSUITE_TEST_FLAKY_LOG"] = str(tmp_path / "started.txt")
    from envsuite import register

    register("scratch/flaky-v0", "tests.support.flaky_env:FlakyEnv", reward_range=(0.0, 1.0))
    yield "scratch/flaky-v0", tmp_path / "started.txt"
    registry.unregister("scratch/flaky-v0")


def test_interrupted_bench_resumes_without_redoing_finished_samples(
    tmp_path: Path, flaky_env: tuple[str, Path]
) -> None:
    env_id, started_log = flaky_env
    failing_seed = episode_seeds(env_id, 6, 0)[2]
    Path(os.environ["ENVSUITE_TEST_FLAKY_FLAG"]).write_text(str(failing_seed))
    config = BenchConfig(
        model=TEST_MODEL,
        max_tokens=4,
        env_ids=(env_id,),
        episodes=6,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        display="none",
    )
    first = run_bench(config)
    assert not first.completed  # one sample failed mid-run
    Path(os.environ["ENVSUITE_TEST_FLAKY_FLAG"]).unlink()
    second = run_bench(config)
    assert second.completed
    starts = started_log.read_text().split()
    # The five samples that finished in the first run are reused; only the failed one runs again.
    assert len(set(starts)) == 6
    assert all(starts.count(seed) == 1 for seed in set(starts) if seed != str(failing_seed))
    assert starts.count(str(failing_seed)) >= 2
    store = ResultStore(config.db)
    try:
        assert len(store.episodes()) == 6
    finally:
        store.close()
