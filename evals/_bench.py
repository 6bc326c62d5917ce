"""``envsuite bench``: one model or checkpoint across catalog envs, as Inspect logs, into the leaderboard.

Phases: check the model (before anything is written) -> resolve the envs -> play them with one of two
runners -> import each env's log into the result store as the env ends -> rank. The runners:

* ``inspect``: an Inspect eval set, one task per env and one Inspect sample per episode; any Inspect
  model. Logs go to a directory named after the model and settings, and ``eval_set`` reuses finished
  work there, so a run that is killed and started again does not redo finished samples.
* ``direct`` (the default for envsuite models): envsuite plays the episodes with the same solver code,
  journals each finished one, and writes each env as an ordinary Inspect log (``evals._direct``); ~4x
  less overhead than Inspect's per-sample machinery, and a rerun resumes from the journals.

Each env is stored as soon as it ends, so a killed bench keeps every finished env. Importing a log is
idempotent (keyed by the eval id and sample), so re-importing after a resume adds nothing.

Every episode has a wall-clock bound (``episode_timeout_s``, 600 s by default): a model that never
stops a turn makes a multi-turn env (twenty questions: up to 20 turns of ``max_tokens`` each) take
minutes per episode, and no episode of a task finishes before its last turn. An episode past the bound
is scored with what it earned so far and ``stop_reason: rollout_timeout``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envsuite import RendererConfig, catalog_reward_ranges
from envsuite.evals._bench_config import (
    BenchConfig,
    BenchReport,
    check_model,
    display_mode,
)
from envsuite.evals._workers import bench_workers
from envsuite.executors import ExecutorConfig
from envsuite.registration import EnvKind, spec

if TYPE_CHECKING:
    from inspect_ai.scorer import Score

    from envsuite.evals._bench_progress import BenchSession


def run_bench(config: BenchConfig) -> BenchReport:
    """Check the model, run the benchmark storing each env as its task ends, and report what happened."""
    check_model(config.model)
    # Imported only now: registering the hooks makes Inspect print a banner on its next use.
    from envsuite.evals._bench_progress import BenchSession, print_line
    from envsuite.evals._provider import forget_cached_conversations, models_released_after

    report = BenchReport(log_dir=config.log_dir())
    display = display_mode(config)
    session = BenchSession(
        label=config.label or config.inspect_model().removeprefix("envsuite/"),
        on_log=lambda location: import_log(location, config),
        say=print_line if display == "lines" else None,
        # Both runners play the envs side by side: once one ends, the KV of its conversations would only
        # sit in the prefix cache next to the others' batches (envsuite bench's 2 GB memory goal). The
        # others' running conversations lose theirs too and prefill their history once more.
        after_task=forget_cached_conversations,
    )
    report.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        # A model this run loaded (and its caches) is not kept past it.
        with bench_workers(config.executor), models_released_after():
            if config.resolved_runner() == "direct":
                _run_direct(config, session, report, display)
            else:
                _run_inspect(config, session, report, display)
    finally:
        with contextlib.suppress(OSError):
            report.log_dir.rmdir()  # only when nothing was written (rmdir refuses a non-empty one)
    report.runs_added, report.episodes_added = session.runs_added, session.episodes_added
    return report


def _run_inspect(config: BenchConfig, session: BenchSession, report: BenchReport, display: str) -> None:
    """One Inspect eval set: a task per env, one Inspect sample per episode."""
    from inspect_ai import eval_set

    from envsuite.evals._bench_progress import bench_session
    from envsuite.evals._task import envsuite_env

    tasks = [
        envsuite_env(
            env_id=env_id,
            episodes=config.episodes,
            seed=config.seed,
            partner=config.partner,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            episode_timeout_s=config.episode_timeout_s,
        )
        for env_id in config.resolved_env_ids()
    ]
    with bench_session(session):
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
        )
    report.completed = bool(success)
    for log in logs:
        report.log_paths.append(str(log.location))
        if log.status == "success":
            session.import_once(str(log.location))


def _run_direct(config: BenchConfig, session: BenchSession, report: BenchReport, display: str) -> None:
    """envsuite plays every episode and writes each env as an Inspect log (``evals._direct``)."""
    import asyncio
    import concurrent.futures

    from envsuite.evals._direct import DirectBench, env_runs
    from envsuite.evals._direct_progress import direct_progress

    runs = env_runs(config, report.log_dir, config.resolved_env_ids())
    finished = [run for run in runs if run.finished_log is not None]
    for run in finished:  # an env whose log an earlier run wrote: (re)import it, play nothing
        session.import_once(str(run.finished_log))
    to_play = [run for run in runs if run not in finished]
    with direct_progress(display, to_play) as on_episode:
        play = DirectBench(config, session, on_episode).play(to_play)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(play)
        else:  # called from a running event loop (a notebook): play on a loop of its own
            with concurrent.futures.ThreadPoolExecutor(1) as thread:
                thread.submit(asyncio.run, play).result()
    report.log_paths = [str(run.finished_log or run.log_path) for run in runs]
    report.completed = all(not run.pending() for run in to_play)


def _renderer_name(config: BenchConfig) -> str:
    codec = config.local_model() or RendererConfig().model_name
    try:
        return RendererConfig(model_name=codec).resolved_renderer_name
    except Exception:
        return "unknown"


def import_log(log_path: str, config: BenchConfig) -> tuple[int, int]:
    """Add one Inspect log's samples to the store; returns (runs added, episodes added)."""
    from inspect_ai.log import read_eval_log

    import envsuite
    from envsuite.leaderboard import EpisodeResult, MatchResult, ResultKey, ResultStore, RunRecord

    log = read_eval_log(log_path, header_only=True)
    metadata: dict[str, Any] = dict(log.eval.metadata or {})
    env_id = str((log.eval.task_args or {}).get("env_id") or metadata.get("env_id"))
    env_spec = spec(env_id)
    episodes = []
    partners: set[str] = set()
    for scored in _scored_samples(log_path):
        value = (
            scored.score.value if isinstance(scored.score.value, dict) else {"reward": 0.0, "success": 0.0}
        )
        meta = dict(scored.score.metadata or {})
        partners.add(str(meta.get("partner") or "builtin"))
        episodes.append(
            EpisodeResult(
                seed=int(scored.sample_metadata["seed"]),
                reward=float(value.get("reward", 0.0)),
                success=float(value.get("success", 0.0)) >= 0.5,
                epoch=scored.epoch,
                metrics={k: float(v) for k, v in dict(meta.get("metrics") or {}).items()},
                transcript_ref=f"{log_path}#{scored.sample_id}",
            )
        )
    key = ResultKey.create(
        model=config.label or config.model,
        env_id=env_spec.id,
        renderer=_renderer_name(config),
        sampling={"max_tokens": config.max_tokens, "temperature": config.temperature, "seed": config.seed},
        seeds=sorted({e.seed for e in episodes}),
        package_version=envsuite.__version__,
        partner=config.partner or (sorted(partners)[0] if partners else "builtin"),
    )
    run = RunRecord(
        key=key,
        run_id=str(log.eval.eval_id),
        log_path=str(log_path),
        config={
            "episodes": config.episodes,
            "env_id": env_spec.id,
            "model": config.local_model() or config.model,
            "inspect_model": config.inspect_model(),
            "episode_timeout_s": config.episode_timeout_s,
        },
        reward_range=env_spec.reward_range,
    )
    store = ResultStore(config.db)
    try:
        added = store.add_run(run, episodes)
        if env_spec.kind is EnvKind.GAME:
            opponent = key.partner
            store.add_matches(
                MatchResult.from_scores(
                    f"{run.run_id}:{e.seed}:{e.epoch}",
                    env_spec.id,
                    {key.model: e.reward, opponent: -e.reward},
                )
                for e in episodes
            )
    finally:
        store.close()
    return int(added.run_added), int(added.episodes_added)


@dataclass(frozen=True)
class _ScoredSample:
    sample_id: int | str
    epoch: int
    sample_metadata: dict[str, Any]
    score: Score


def _scored_samples(log_path: str) -> Iterator[_ScoredSample]:
    """Each scored sample's score and metadata, from the log's sample summaries.

    Summaries are what the leaderboard needs without the transcripts (reading the whole log parsed every
    event of every episode: most of the import's time and memory). A summary replaces metadata fields of
    1k or more with a note; a score whose ``metrics`` were replaced is read from its full sample instead.
    """
    from inspect_ai.log import read_eval_log_sample, read_eval_log_sample_summaries

    for summary in read_eval_log_sample_summaries(log_path):
        score = next(iter(summary.scores.values()), None) if summary.scores else None
        if score is None:
            continue
        sample_metadata = dict(summary.metadata or {})
        # A summary replaces a large field's value with a note ("Key removed from summary (> 1k)").
        if not isinstance((score.metadata or {}).get("metrics"), dict) or "seed" not in sample_metadata:
            sample = read_eval_log_sample(log_path, summary.id, summary.epoch)
            score = next(iter((sample.scores or {}).values()), score)
            sample_metadata = dict(sample.metadata or {})
        yield _ScoredSample(summary.id, int(summary.epoch), sample_metadata, score)


def _base_url(args: Any) -> str | None:
    backend, base_url = getattr(args, "backend", "local"), getattr(args, "base_url", None)
    if backend not in ("local", "tinker"):
        raise ValueError(f"unknown backend {backend!r}; choose 'local' or 'tinker'")
    if backend == "local" and base_url:
        raise ValueError("--base-url is for --backend tinker (the Tinker API over HTTP)")
    if backend == "tinker" and not base_url:
        raise ValueError("--backend tinker needs --base-url (an envsuite serve, or the Tinker API's URL)")
    return str(base_url) if base_url else None


def bench_main(args: Any) -> int:
    """The ``envsuite bench`` handler."""
    from rich.console import Console

    from envsuite.leaderboard import ResultStore, build_leaderboard, render_terminal

    config = BenchConfig(
        model=args.model,
        env_ids=tuple(args.envs or ()),
        episodes=args.episodes,
        seed=args.seed,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        partner=args.partner,
        base_url=_base_url(args),
        log_root=args.log_dir,
        db=args.db,
        label=args.label,
        episode_timeout_s=args.episode_timeout or None,
        executor=ExecutorConfig.create(args.executor, args.workers, args.ray_address),
        runner=getattr(args, "runner", "auto"),
    )
    os.environ.setdefault("INSPECT_LOG_DIR", str(config.log_dir()))
    report = run_bench(config)
    console = Console()
    console.print(
        f"logs: {report.log_dir}  ({len(report.log_paths)} task(s), "
        f"{report.episodes_added} new episode(s) stored; view with `inspect view --log-dir {report.log_dir}`)"
    )
    store = ResultStore(config.db)
    try:
        env_ids = config.resolved_env_ids()
        ranges = catalog_reward_ranges(key.versioned_env_id for key in store.keys(env_ids))
        console.print(render_terminal(build_leaderboard(store, env_ids=env_ids, catalog_ranges=ranges)))
    finally:
        store.close()
    return 0 if report.completed else 1
