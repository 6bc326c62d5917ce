"""Inspect integration: the envsuite provider, catalog tasks, partners, and `envsuite bench` with resume.

Real parts throughout: real Inspect runs, the envsuite provider over the real local sampler with the
tiny model, Inspect's offline ``mockllm`` as a stand-in third-party model, a real SQLite store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage

from envsuite.evals import BenchConfig, envsuite_env, run_bench
from envsuite.leaderboard import ResultStore
from envsuite.registration import registry
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


def _bench_config(tmp_path: Path, *env_ids: str, **settings: Any) -> BenchConfig:
    """A bench of the test model on ``env_ids`` writing under ``tmp_path``, quiet unless told."""
    defaults: dict[str, Any] = {"model": TEST_MODEL, "display": "none"}
    return BenchConfig(
        env_ids=env_ids,
        log_root=str(tmp_path / "logs"),
        db=str(tmp_path / "board.sqlite"),
        **(defaults | settings),
    )


def test_bench_records_results_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    config = _bench_config(tmp_path, "arithmetic", "tictactoe", episodes=2, max_tokens=8)
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


_BENCH_SCRIPT = """
import sys
import envsuite
from envsuite.evals import BenchConfig, run_bench
envsuite.register("scratch/slow-v0", "tests.support.flaky_env:SlowEnv", reward_range=(0.0, 1.0))
run_bench(BenchConfig(model="tiny-random", env_ids=("scratch/slow",), episodes=6, max_tokens=4,
                      log_root=sys.argv[1], db=sys.argv[2], display="none", max_samples=1,
                      runner=sys.argv[3]))
"""


def _events(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []  # type: ignore[misc]


@pytest.mark.parametrize("runner", ["direct", "inspect"])
def test_killed_bench_resumes_without_redoing_finished_samples(tmp_path: Path, runner: str) -> None:
    events = tmp_path / "events.txt"
    env = {**os.environ, "ENVSUITE_TEST_EPISODE_LOG": str(events), "ENVSUITE_TEST_STEP_SECONDS": "1.5"}
    args = [
        sys.executable,
        "-c",
        _BENCH_SCRIPT,
        str(tmp_path / "logs"),
        str(tmp_path / "board.sqlite"),
        runner,
    ]
    process = subprocess.Popen(args, env=env, cwd=Path(__file__).parents[1])
    deadline = time.monotonic() + 300
    while sum(1 for e, _ in _events(events) if e == "done") < 3 and time.monotonic() < deadline:
        assert process.poll() is None, "the bench finished before it could be killed"
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished_before_kill = {seed for event, seed in _events(events) if event == "done"}
    assert 3 <= len(finished_before_kill) < 6

    env["ENVSUITE_TEST_STEP_SECONDS"] = "0"
    subprocess.run(args, env=env, cwd=Path(__file__).parents[1], check=True, timeout=600)
    starts = [seed for event, seed in _events(events) if event == "start"]
    assert len(set(starts)) == 6
    redone = {seed for seed in finished_before_kill if starts.count(seed) > 1}
    # Only an episode finished in the env but not yet journaled (direct) or flushed to the log (inspect)
    # when the kill came may rerun.
    assert len(redone) <= 1, (redone, starts)
    store = ResultStore(str(tmp_path / "board.sqlite"))
    try:
        assert len(store.episodes()) == 6
    finally:
        store.close()


def test_a_failing_env_is_scored_as_env_error(tmp_path: Path) -> None:
    from envsuite import register

    register("scratch/raising-step-v0", "tests.support.flaky_env:RaisingStepEnv", reward_range=(0.0, 1.0))
    try:
        task = envsuite_env(env_id="scratch/raising-step", episodes=2, max_tokens=4)
        (log,) = inspect_eval(task, model=f"envsuite/{TEST_MODEL}", log_dir=str(tmp_path), display="none")
    finally:
        registry.unregister("scratch/raising-step-v0")
    assert log.status == "success"
    for sample in log.samples or []:
        score = next(iter(sample.scores.values()))  # type: ignore[union-attr]
        assert score.metadata is not None and score.metadata["stop_reason"] == "env_error"
        assert "env exploded" in score.metadata["error"]


def test_bad_env_kwargs_fail_the_task_at_once(tmp_path: Path) -> None:
    """Issue 15.2: a bad dataset is an error when the task is built, not 0 reward on every sample."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"foo": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: unknown record format"):
        envsuite_env(env_id="math", episodes=2, env_kwargs={"dataset": str(bad)})


async def test_provider_honours_num_choices_logprobs_and_stop_seqs() -> None:
    """Issue 15.11: settings the provider used to ignore are honoured."""
    from inspect_ai.model import GenerateConfig, get_model

    model = get_model(f"envsuite/{TEST_MODEL}")
    base = GenerateConfig(max_tokens=24, temperature=1.0, seed=3)
    three = await model.generate(
        "Say something.", config=base.merge(GenerateConfig(num_choices=3, logprobs=True))
    )
    assert len(three.choices) == 3
    assert len({c.message.text for c in three.choices}) == 3
    for choice in three.choices:
        assert choice.logprobs is not None and len(choice.logprobs.content) >= 1
        assert all(lp.logprob <= 0.0 for lp in choice.logprobs.content)
    full = (await model.generate("Say something.", config=base)).completion
    assert len(full) > 6
    stop = full[3:6]
    cut = await model.generate("Say something.", config=base.merge(GenerateConfig(stop_seqs=[stop])))
    assert cut.completion == full[: full.index(stop)] and cut.choices[0].stop_reason == "stop"


async def test_provider_refuses_what_it_cannot_honour() -> None:
    from inspect_ai.model import GenerateConfig, get_model

    model = get_model(f"envsuite/{TEST_MODEL}")
    with pytest.raises(ValueError, match="cannot honour top_logprobs, logit_bias"):
        await model.generate("Hi", config=GenerateConfig(max_tokens=4, top_logprobs=5, logit_bias={1: 2.0}))


# -- envsuite bench as a new user meets it (issue 15.9, 15.14, 15.16) --------------------------------


def test_bench_says_what_is_wrong_with_a_model_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from envsuite.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for model, needle in (
        (
            "nosuchmodel",
            "unknown model 'nosuchmodel'. Use an envsuite model (smollm2-135m-instruct, tiny-random)",
        ),
        ("smolm2-135m-instruct", "did you mean 'smollm2-135m-instruct'"),
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("./no/such/dir", "no model directory"),
    ):
        code = main(["bench", "--model", model, "--envs", "arithmetic", "--log-dir", str(tmp_path / "logs")])
        err = capsys.readouterr().err
        assert code == 2 and needle in err, err
        assert len(err.strip().splitlines()) == 1 and "[bold]" not in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()


_KILL_SCRIPT = """
import sys
import envsuite
from envsuite.evals import BenchConfig, run_bench
envsuite.register("scratch/slow-v0", "tests.support.flaky_env:SlowEnv", reward_range=(0.0, 1.0))
run_bench(BenchConfig(model="tiny-random", env_ids=("arithmetic", "scratch/slow"), episodes=3, max_tokens=4,
                      log_root=sys.argv[1], db=sys.argv[2], display="lines", max_samples=1))
"""


def test_a_killed_bench_keeps_every_env_that_finished(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ENVSUITE_TEST_EPISODE_LOG": str(tmp_path / "events.txt"),
        "ENVSUITE_TEST_STEP_SECONDS": "60",
    }
    args = [sys.executable, "-c", _KILL_SCRIPT, str(tmp_path / "logs"), str(tmp_path / "board.sqlite")]
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        process = subprocess.Popen(args, env=env, cwd=Path(__file__).parents[1], stdout=sink)
        deadline = time.monotonic() + 300
        while "arithmetic-v0: finished in" not in out.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, out.read_text()
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert "scratch/slow-v0: finished" not in out.read_text()
    store = ResultStore(str(tmp_path / "board.sqlite"))
    try:
        assert {k.env_id for k in store.keys()} == {"arithmetic"}  # noqa: SIM118  (a query, not a dict)
        assert len(store.episodes()) == 3
    finally:
        store.close()


def test_an_episode_past_its_time_bound_is_a_scored_rollout_timeout(tmp_path: Path) -> None:
    from envsuite import register

    register("scratch/endless-v0", "tests.support.flaky_env:EndlessEnv", reward_range=(0.0, 1000.0))
    try:
        task = envsuite_env(env_id="scratch/endless", episodes=2, max_tokens=2, episode_timeout_s=2)
        (log,) = inspect_eval(task, model=f"envsuite/{TEST_MODEL}", log_dir=str(tmp_path), display="none")
    finally:
        registry.unregister("scratch/endless-v0")
    assert log.status == "success" and log.samples
    for sample in log.samples:
        score = next(iter(sample.scores.values()))  # type: ignore[union-attr]
        assert score.metadata is not None and score.metadata["stop_reason"] == "rollout_timeout"
        assert 1.0 <= score.value["reward"] <= 12.0  # type: ignore[index]  (turns done at 0.2 s each)


def test_a_model_directory_is_benched_under_its_label_with_progress_naming_envs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envsuite import RendererConfig
    from envsuite.models import resolve_model

    model_dir = str(resolve_model(TEST_MODEL).path)
    config = _bench_config(
        tmp_path, "arithmetic", model=model_dir, label="tiny+dir", episodes=2, max_tokens=4, display="lines"
    )
    assert config.inspect_model() == "envsuite/tiny+dir" and config.model_args() == {"path": model_dir}
    report = run_bench(config)
    assert report.completed and report.episodes_added == 2
    log = read_eval_log(report.log_paths[0])
    assert log.eval.model == "envsuite/tiny+dir" and "//" not in log.eval.model
    out = capsys.readouterr().out
    assert "tiny+dir on arithmetic-v0: 2/2 episodes" in out and "arithmetic-v0: finished in" in out
    assert "stored in the leaderboard" in out
    store = ResultStore(config.db)
    try:
        (key,) = store.keys()
        # The directory's own renderer (looked up from its path, not from the label).
        assert key.renderer == RendererConfig(model_name=model_dir).resolved_renderer_name != "unknown"
    finally:
        store.close()


def test_bench_progress_shows_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15.5: a label holding an ESC sequence cannot drive the terminal through bench's lines."""
    config = _bench_config(
        tmp_path, "arithmetic", label="evil\x1b[2J\x1b]0;title\x07", episodes=1, max_tokens=2, display="lines"
    )
    run_bench(config)
    out = capsys.readouterr().out
    assert "on arithmetic-v0: 1/1 episodes" in out
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b[2J" in out


def test_a_finished_bench_lets_its_model_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The demo benches the base model, then the trained one, in one process: the first model (and its
    # KV and prefix caches) must not stay loaded through the second run, neither in envsuite's model
    # cache nor through the model objects Inspect keeps for the whole process.
    import gc
    import weakref

    import envsuite.backends
    from envsuite.evals import _provider

    monkeypatch.setattr(_provider, "_loaded", {})  # whatever earlier tests loaded is not this test's
    loaded: list[weakref.ref[object]] = []
    load = envsuite.backends.sampling_client_for

    def recorded(*args: object, **kwargs: object) -> object:
        client = load(*args, **kwargs)  # type: ignore[arg-type]
        loaded.append(weakref.ref(client))
        return client

    monkeypatch.setattr(envsuite.backends, "sampling_client_for", recorded)
    config = _bench_config(tmp_path, "arithmetic", episodes=1, max_tokens=4)
    assert run_bench(config).completed
    gc.collect()
    assert len(loaded) == 1 and loaded[0]() is None
    # A model loaded before the run (a benchmark script warming up) is the caller's: it stays.
    held = _provider.local_model(TEST_MODEL)
    assert run_bench(replace(config, seed=1)).completed
    assert len(loaded) == 2 and loaded[1]() is held.sampling_client


def test_a_bench_drops_the_cached_conversations_of_envs_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An env's episodes never return once its task is over, so their KV must not sit in the model's
    # prefix cache next to the other envs' batches (envsuite bench's 2 GB memory goal). The model is
    # loaded first so it outlives the run and its cache can be read.
    from envsuite.evals import _provider

    monkeypatch.setattr(_provider, "_loaded", {})
    held = _provider.local_model(TEST_MODEL)
    config = _bench_config(tmp_path, "twenty_questions", "arithmetic", episodes=2, max_tokens=4)
    assert run_bench(config).completed
    stats = held.sampling_client.prefix_cache_stats()
    assert stats.inserted_tokens > 0  # conversations were cached while the envs ran...
    assert stats.cached_tokens == 0 and stats.cached_bytes == 0  # ...and dropped as the tasks ended
    held.sampling_client.close()


def test_import_log_reads_metrics_a_sample_summary_dropped(tmp_path: Path) -> None:
    """The store is filled from Inspect's sample summaries (not the whole log); a summary drops score
    metadata fields of 1k or more (a note in their place), so a large ``metrics`` dict must come from the full sample instead."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.log import read_eval_log_sample_summaries
    from inspect_ai.scorer import Score, Scorer, Target, mean, scorer
    from inspect_ai.solver import Generate, Solver, TaskState, solver

    from envsuite.evals import BenchConfig, import_log
    from envsuite.leaderboard import ResultStore

    many = {f"metric_{i:03d}": float(i) for i in range(120)}  # > 1k of JSON: dropped from summaries

    @solver
    def do_nothing() -> Solver:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            return state

        return solve

    @scorer(metrics=[mean()])
    def scored() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score:
            small = state.metadata["seed"] == 0
            metrics = {"turns": 1.0} if small else many
            return Score(
                value={"reward": 1.0, "success": 1.0}, metadata={"metrics": metrics, "partner": None}
            )

        return score

    dataset = [Sample(input=str(seed), id=f"s{seed}", metadata={"seed": seed}) for seed in (0, 1)]
    task = Task(dataset=dataset, solver=do_nothing(), scorer=scored(), metadata={"env_id": "arithmetic"})
    (log,) = inspect_eval(task, model="mockllm/model", log_dir=str(tmp_path / "logs"), display="none")
    summaries = {s.id: s for s in read_eval_log_sample_summaries(log.location)}
    dropped = (summaries["s1"].scores or {})["scored"].metadata or {}
    assert not isinstance(dropped.get("metrics"), dict)  # the case under test: a note, not the metrics
    config = BenchConfig(
        model="tiny-random", env_ids=("arithmetic",), episodes=2, db=str(tmp_path / "b.sqlite")
    )
    assert import_log(log.location, config) == (1, 2)
    with ResultStore(str(tmp_path / "b.sqlite")) as store:
        metrics = {e.episode.seed: e.episode.metrics for e in store.episodes()}
    assert metrics == {0: {"turns": 1.0}, 1: many}


def test_an_eval_set_of_fixed_items_is_benched_in_order_from_its_first_item() -> None:
    """Envs whose episodes pick one of a fixed set of items (``seed % n``: BFCL, HumanEval, the standard
    sets; ``item_count_of`` on the env class) play items 0.. in order at ``--seed 0``, a later window for
    another seed, and no item twice until the set is used up (hashed seeds played 91 distinct of BFCL
    simple's first 100 draws); an env that draws its items from the seed keeps hashed seeds."""
    from envsuite.evals import episode_seeds

    assert episode_seeds("bfcl/simple", 100, 0) == list(range(100))
    assert episode_seeds("humaneval", 3, 1) == [3, 4, 5]
    assert episode_seeds("humaneval", 170, 0)[160:] == [160, 161, 162, 163, 0, 1, 2, 3, 4, 5]
    multi = episode_seeds("bfcl/multi_turn_base", 4, 0)
    assert multi == [0, 1, 2, 3]
    drawn = episode_seeds("arithmetic", 50, 0)
    assert len(set(drawn)) == 50 and drawn != list(range(50)) and drawn == episode_seeds("arithmetic", 50, 0)
