"""``envsuite bench``'s Inspect runner: an Inspect eval set, one task per env, one sample per episode.

Any Inspect model runs here. Logs go to a directory named after the model and settings, and ``eval_set``
reuses finished work there, so a run that is killed and started again does not redo finished samples.

Inspect calls the hooks below from its own event loop for every eval in the process; they act only while
a bench is running (:func:`_active_bench`). When a task ends its log is stored right away (read with
Inspect's async API on that loop, never its sync one: see ``evals._loops``), so a bench killed later keeps
every finished env; storing is idempotent, so the pass over the logs at the end adds nothing twice.
Importing this module registers the hooks, which makes Inspect print a banner on its next use, so the
bench imports it only to run this runner.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inspect_ai import eval_set
from inspect_ai.hooks import Hooks, SampleEnd, TaskEnd, TaskStart, hooks
from inspect_ai.log import EvalSample

from envsuite.evals._rubric import task_args
from envsuite.evals._task import envsuite_env
from envsuite.evals.bench._budget import env_limits

if TYPE_CHECKING:
    from envsuite.evals.bench._config import BenchConfig, BenchReport
    from envsuite.evals.bench._progress import BenchSession
    from envsuite.evals.bench._rows import BenchRecorder


@dataclass(frozen=True)
class _Bench:
    session: BenchSession
    recorder: BenchRecorder


_ACTIVE: _Bench | None = None


@contextlib.contextmanager
def _active_bench(bench: _Bench) -> Iterator[None]:
    """Make ``bench`` the one the hooks serve while the ``with`` block runs."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, bench
    try:
        yield
    finally:
        _ACTIVE = previous


def run_inspect(
    config: BenchConfig, recorder: BenchRecorder, session: BenchSession, report: BenchReport, display: str
) -> None:
    """Run the bench's envs as one Inspect eval set, storing each env as its task ends. An env whose task
    cannot be built is reported and skipped."""
    tasks, planned = [], []
    for env_id in config.resolved_env_ids():
        try:
            limits = env_limits(config, env_id)
            tasks.append(
                envsuite_env(
                    env_id=env_id,
                    episodes=config.episodes,
                    seed=config.seed,
                    partner=config.partner,
                    max_tokens=limits.max_tokens,
                    temperature=config.temperature,
                    episode_timeout_s=limits.episode_timeout_s,
                    **task_args(config.rubric_settings()),
                    **limits.task_args(),
                )
            )
            planned.append(env_id)
        except Exception as exc:
            session.env_skipped(env_id, f"{type(exc).__name__}: {exc}"[:300])
    # Inspect's eval set skips what an earlier run finished; the estimate counts every episode.
    plays = config.episodes * config.samples
    session.plan(len(tasks), len(tasks) * plays, to_play=[(env_id, plays) for env_id in planned])
    with _active_bench(_Bench(session, recorder)):
        success, logs = eval_set(
            tasks,
            log_dir=str(report.log_dir),
            model=config.inspect_model(),
            model_args=config.model_args(),
            display="none" if display == "lines" else display,  # type: ignore[arg-type]
            max_samples=config.max_samples,
            max_connections=config.max_samples,
            model_base_url=config.base_url,
            retry_attempts=1,
            fail_on_error=False,
            log_format="eval",
            # Flush every finished sample, so a killed run loses at most the samples in flight.
            log_buffer=1,
            # Several plays per episode are Inspect epochs (each samples with its own seed: see
            # ``play_env``); one play passes nothing, as before the setting existed.
            epochs=config.samples if config.samples > 1 else None,
        )
    report.completed = bool(success) and not session.failed
    for log in logs:
        report.log_paths.append(str(log.location))
        if log.status == "success":  # stored already unless the hooks missed it (an earlier run's log)
            recorder.store_log_now(str(log.location))


def _reward(sample: EvalSample) -> float | None:
    for score in (sample.scores or {}).values():
        value = score.value
        if isinstance(value, dict) and isinstance(value.get("reward"), int | float):
            return float(value["reward"])
    return None


@hooks(
    name="envsuite_bench",
    description="envsuite bench: store each finished env at once, name envs in progress",
)
class BenchHooks(Hooks):
    def enabled(self) -> bool:
        return _ACTIVE is not None

    async def on_task_start(self, data: TaskStart) -> None:
        if _ACTIVE is not None:
            env_id = str((data.spec.task_args or {}).get("env_id") or data.spec.task)
            plays = int(data.spec.dataset.samples or 0) * max(1, int(data.spec.config.epochs or 1))
            _ACTIVE.session.task_started(data.eval_id, env_id, plays)

    async def on_sample_end(self, data: SampleEnd) -> None:
        if _ACTIVE is not None:
            _ACTIVE.session.sample_ended(data.eval_id, _reward(data.sample))

    async def on_task_end(self, data: TaskEnd) -> None:
        if _ACTIVE is None:
            return
        location, status = str(data.log.location or ""), str(data.log.status)
        if status != "success" or not location:
            _ACTIVE.session.task_failed(data.eval_id, status)
            return
        await _ACTIVE.recorder.store_log(location)
        _ACTIVE.session.task_ended(data.eval_id, Path(location).name)
