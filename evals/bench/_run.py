"""``envsuite bench``: one model or checkpoint across catalog envs, as Inspect logs, into the leaderboard.

Phases: check the model (before anything is written) -> resolve the envs -> play them with one of two
runners, storing each env in the result store as it ends (``evals.bench._rows``). The runners:

* ``inspect`` (``evals.bench._inspect_runner``): an Inspect eval set, one task per env and one Inspect sample
  per episode; any Inspect model. ``eval_set`` reuses finished work in the log directory, so a run that
  is killed and started again does not redo finished samples. Each finished log is stored.
* ``direct`` (``evals.direct._runner``, the default for envsuite models): envsuite plays the episodes with the
  same solver code, journals each finished one, writes each env as an ordinary Inspect log and stores
  the episodes it played; ~4x less overhead than Inspect's per-sample machinery, and a rerun resumes
  from the journals.

Each env is stored as soon as it ends, so a killed bench keeps every finished env. Storing is idempotent
(keyed by the eval id and sample), so storing again after a resume adds nothing.

Every episode has a wall-clock bound (``episode_timeout_s``, 600 s by default): a model that never
stops a turn makes a multi-turn env (twenty questions: up to 20 turns of ``max_tokens`` each) take
minutes per episode, and no episode of a task finishes before its last turn. An episode past the bound
is scored with what it earned so far and ``stop_reason: rollout_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib

from envsuite.evals._loops import run_outside_loop
from envsuite.evals._workers import bench_workers
from envsuite.evals.bench._budget import episode_costs
from envsuite.evals.bench._config import BenchConfig, BenchReport, check_model, display_mode
from envsuite.evals.bench._progress import BenchSession, print_line
from envsuite.evals.bench._rows import BenchRecorder


def run_bench(config: BenchConfig) -> BenchReport:
    """Check the model, run the benchmark storing each env as it ends, and report what happened.

    Called with an event loop running in this thread (a notebook), the bench runs on a thread of its own:
    both runners drive Inspect's synchronous API, which must not re-enter a running loop."""
    return run_outside_loop(_run_bench, config)


def _run_bench(config: BenchConfig) -> BenchReport:
    check_model(config.model)
    from envsuite.evals._provider import forget_cached_conversations, models_released_after

    report = BenchReport(log_dir=config.log_dir())
    display = display_mode(config)
    recorder = BenchRecorder(config)
    session = BenchSession(
        label=config.label or config.inspect_model().removeprefix("envsuite/"),
        say=print_line if display == "lines" else None,
        # Both runners play the envs side by side: once one ends, the KV of its conversations would only
        # sit in the prefix cache next to the others' batches (envsuite bench's 2 GB memory goal). The
        # others' running conversations lose theirs too and prefill their history once more.
        after_task=forget_cached_conversations,
        cost=episode_costs(config.budget),
    )
    report.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        # A model this run loaded (and its caches) is not kept past it.
        with bench_workers(config.executor), models_released_after():
            if config.resolved_runner() == "direct":
                _run_direct(config, recorder, session, report, display)
            else:
                # Imported only now: registering its hooks makes Inspect print a banner on its next use.
                from envsuite.evals.bench._inspect_runner import run_inspect

                run_inspect(config, recorder, session, report, display)
    finally:
        with contextlib.suppress(OSError):
            report.log_dir.rmdir()  # only when nothing was written (rmdir refuses a non-empty one)
    report.runs_added, report.episodes_added = recorder.runs_added, recorder.episodes_added
    report.failed_envs = dict(session.failed)
    return report


def _run_direct(
    config: BenchConfig, recorder: BenchRecorder, session: BenchSession, report: BenchReport, display: str
) -> None:
    """envsuite plays every env here and writes each as an Inspect log (``evals.direct._runner``); an env an
    earlier bench finished is stored from its log and not played again."""
    from envsuite.evals.direct._progress import direct_progress
    from envsuite.evals.direct._runner import DirectBench, env_runs

    env_ids = config.resolved_env_ids()
    runs = env_runs(config, report.log_dir, env_ids, on_error=session.env_skipped)
    finished = [run for run in runs if run.finished_log is not None]
    for run in finished:
        recorder.store_log_now(str(run.finished_log))
    to_play = [run for run in runs if run not in finished]
    with direct_progress(display, to_play, session) as on_episode:
        session.plan(
            len(to_play),
            sum(len(run.pending()) for run in to_play),
            resumed=sum(len(run.records) for run in to_play),
            finished_envs=len(finished),
            to_play=[(run.env_id, len(run.pending())) for run in to_play],
        )
        asyncio.run(DirectBench(config, recorder, session, on_episode).play(to_play))
    report.log_paths = [str(run.finished_log or run.log_path) for run in runs]
    report.completed = len(runs) == len(env_ids) and all(not run.pending() for run in to_play)
    report.completed = report.completed and not session.failed
