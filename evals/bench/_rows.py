"""What ``envsuite bench`` stores: each env it played, as leaderboard rows, written once it ends.

The flow goes one way: a runner hands over the scored episodes of a finished env, :class:`BenchRecorder`
turns them into rows (:class:`EnvRows`: the run, its episodes and, for games, its matches) and writes
them to the store. The direct runner hands over the episodes it played (:func:`played_episodes`); the
Inspect runner, whose episodes exist only in the logs Inspect's eval set writes, hands over each
finished log (:func:`logged_env`). Both give the same rows for the same episodes
(``tests/test_bench_runners.py``). Storing is idempotent (the store keys a run by its eval id and an
episode by its seed and epoch), and a recorder stores a log once per bench.

Inspect's synchronous log API (``read_eval_log`` and friends) must never run on a thread whose event
loop is running: it re-enters that loop through nest_asyncio, and the outer loop's ``_run_once`` then
pops handles the nested run already took (``IndexError: pop from an empty deque``, the whole-catalog
bench crash). So logs are read here with Inspect's ``_async`` functions on the caller's loop, and
:func:`import_log`, the synchronous entry, runs them on a loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import envsuite
from envsuite import RendererConfig
from envsuite.catalog.registration import EnvKind, EnvSpec, spec
from envsuite.evals._loops import run_outside_loop
from envsuite.evals._task import episode_score, sample_id
from envsuite.evals.bench._budget import env_limits
from envsuite.leaderboard import (
    SAMPLES_SETTING,
    EpisodeResult,
    JsonScalar,
    MatchResult,
    ResultKey,
    ResultStore,
    RunRecord,
)

if TYPE_CHECKING:
    from inspect_ai.scorer import Score

    from envsuite.evals.bench._config import BenchConfig
    from envsuite.evals.direct._log import EpisodeRecord


@dataclass(frozen=True)
class ScoredEpisode:
    """One scored episode as the store needs it: which Inspect sample it is, its seed and its score."""

    sample_id: int | str
    epoch: int
    seed: int
    score: Score


@dataclass(frozen=True)
class LoggedEnv:
    """What an Inspect log of one env holds for the store."""

    env_id: str
    run_id: str
    """The log's eval id."""
    episodes: list[ScoredEpisode]


@dataclass(frozen=True)
class EnvRows:
    """One env of a bench as the store's rows."""

    run: RunRecord
    episodes: list[EpisodeResult]
    matches: list[MatchResult]
    """A game's episodes as matches against its opponent (none for other envs)."""


def played_episodes(env_id: str, records: Iterable[EpisodeRecord]) -> list[ScoredEpisode]:
    """The direct runner's finished episodes, scored as its log scores them (failed ones are left out,
    as a log's unscored samples are)."""
    return [
        ScoredEpisode(sample_id(env_id, r.seed), r.epoch, r.seed, episode_score(r.result, r.answer))
        for r in records
        if r.error is None
    ]


async def logged_env(log_path: str) -> LoggedEnv:
    """The env, eval id and scored episodes of a finished Inspect log, read from its sample summaries.

    Summaries are what the leaderboard needs without the transcripts (reading the whole log parsed every
    event of every episode: most of the time and memory). A summary replaces metadata fields of 1k or
    more with a note; a score whose ``metrics`` were replaced is read from its full sample instead.
    """
    from inspect_ai.log import (
        read_eval_log_async,
        read_eval_log_sample_async,
        read_eval_log_sample_summaries_async,
    )

    log = await read_eval_log_async(log_path, header_only=True)
    metadata: dict[str, Any] = dict(log.eval.metadata or {})
    env_id = str((log.eval.task_args or {}).get("env_id") or metadata.get("env_id"))
    episodes = []
    for summary in await read_eval_log_sample_summaries_async(log_path):
        score = next(iter(summary.scores.values()), None) if summary.scores else None
        if score is None:
            continue
        sample_metadata = dict(summary.metadata or {})
        # A summary replaces a large field's value with a note ("Key removed from summary (> 1k)").
        if not isinstance((score.metadata or {}).get("metrics"), dict) or "seed" not in sample_metadata:
            sample = await read_eval_log_sample_async(log_path, summary.id, summary.epoch)
            score = next(iter((sample.scores or {}).values()), score)
            sample_metadata = dict(sample.metadata or {})
        episodes.append(ScoredEpisode(summary.id, int(summary.epoch), int(sample_metadata["seed"]), score))
    return LoggedEnv(env_id, str(log.eval.eval_id), episodes)


def dataset_revision(env_spec: EnvSpec) -> str | None:
    """The dataset revision (or content hash) ``env_spec``'s episodes come from: what its env class's
    ``dataset_revision_of(kwargs)`` says; None for envs that generate their items (no dataset to pin)."""
    entry = env_spec.load()
    hook = getattr(entry, "dataset_revision_of", None)
    return str(hook(dict(env_spec.kwargs))) if callable(hook) else None


class BenchRecorder:
    """Turns one bench's finished envs into rows and stores them.

    What every row of the bench shares (the leaderboard name, renderer, sampling settings) is worked out
    once, from the config, when the recorder is made. Safe to call from worker threads: writes to the
    store are one at a time.
    """

    def __init__(self, config: BenchConfig) -> None:
        self.config = config
        self.model_name = config.label or config.model
        """The name on the leaderboard."""
        self.renderer = _renderer_name(config)
        self.runs_added = 0
        self.episodes_added = 0
        self._stored: set[str] = set()
        self._lock = threading.Lock()

    def rows(self, env_id: str, run_id: str, log_path: str, episodes: Iterable[ScoredEpisode]) -> EnvRows:
        """The rows of one env's run: ``episodes`` as written to the log at ``log_path``."""
        config = self.config
        env_spec = spec(env_id)
        limits = env_limits(config, env_spec.id)
        results = []
        partners: set[str] = set()
        for scored in episodes:
            value: dict[str, Any] = (
                scored.score.value
                if isinstance(scored.score.value, dict)
                else {"reward": 0.0, "success": 0.0}
            )
            meta = dict(scored.score.metadata or {})
            partners.add(str(meta.get("partner") or "builtin"))
            results.append(
                EpisodeResult(
                    seed=scored.seed,
                    reward=float(value.get("reward", 0.0)),
                    success=float(value.get("success", 0.0)) >= 0.5,
                    epoch=scored.epoch,
                    metrics={k: float(v) for k, v in dict(meta.get("metrics") or {}).items()},
                    transcript_ref=f"{log_path}#{scored.sample_id}",
                )
            )
        key = ResultKey.create(
            model=self.model_name,
            env_id=env_spec.id,
            renderer=self.renderer,
            sampling=sampling_settings(config, env_spec.id),
            seeds=sorted({e.seed for e in results}),
            package_version=envsuite.__version__,
            partner=config.partner or (sorted(partners)[0] if partners else "builtin"),
        )
        run = RunRecord(
            key=key,
            run_id=run_id,
            log_path=log_path,
            config={
                "episodes": config.episodes,
                "env_id": env_spec.id,
                "model": config.local_model() or config.model,
                "inspect_model": config.inspect_model(),
                "episode_timeout_s": limits.episode_timeout_s,
            }
            | ({"budget": config.budget, "max_turns": limits.max_turns} if limits.budget else {})
            | ({"samples": config.samples} if config.samples > 1 else {})
            | ({"rubric": config.rubric, "judge": config.judge} if config.rubric is not None else {}),
            reward_range=env_spec.reward_range,
            dataset_revision=dataset_revision(env_spec),
        )
        matches = []
        if env_spec.kind is EnvKind.GAME:
            players = (key.model, key.partner)
            matches = [
                MatchResult.from_scores(
                    f"{run_id}:{e.seed}:{e.epoch}", env_spec.id, {players[0]: e.reward, players[1]: -e.reward}
                )
                for e in results
            ]
        return EnvRows(run, results, matches)

    def stored(self, log_path: str) -> bool:
        """Whether this bench already stored the run logged at ``log_path``."""
        return log_path in self._stored

    def store(self, rows: EnvRows) -> None:
        """Write ``rows`` (nothing when this bench stored that log already) and count what was new."""
        log_path = str(rows.run.log_path)
        with self._lock:
            if log_path in self._stored:
                return
            store = ResultStore(self.config.db)
            try:
                added = store.add_run(rows.run, rows.episodes)
                if rows.matches:
                    store.add_matches(rows.matches)
            finally:
                store.close()
            self._stored.add(log_path)
            self.runs_added += int(added.run_added)
            self.episodes_added += int(added.episodes_added)

    async def store_played(
        self, env_id: str, run_id: str, log_path: str, records: list[EpisodeRecord]
    ) -> None:
        """Store the episodes the direct runner played (the store's I/O off the event loop)."""
        rows = self.rows(env_id, run_id, log_path, played_episodes(env_id, records))
        await asyncio.to_thread(self.store, rows)

    async def store_log(self, log_path: str) -> None:
        """Store a finished Inspect log (read with Inspect's async API on the running loop)."""
        if self.stored(log_path):
            return
        logged = await logged_env(log_path)
        await asyncio.to_thread(
            self.store, self.rows(logged.env_id, logged.run_id, log_path, logged.episodes)
        )

    def store_log_now(self, log_path: str) -> None:
        """:meth:`store_log` from synchronous code (on a loop of its own, never a running one)."""
        run_outside_loop(asyncio.run, self.store_log(log_path))


def import_log(log_path: str, config: BenchConfig) -> tuple[int, int]:
    """Add one Inspect log's samples to the store as a bench with ``config`` would; returns (runs added,
    episodes added). Safe to call with an event loop running in this thread (a notebook)."""
    recorder = BenchRecorder(config)
    recorder.store_log_now(log_path)
    return recorder.runs_added, recorder.episodes_added


def sampling_settings(config: BenchConfig, env_id: str | None = None) -> dict[str, JsonScalar]:
    """What the result key records of how the bench sampled and scored ``env_id``. Plays per episode
    (``samples``) are part of it, so benches of different K are different keys, never pooled; one play
    adds nothing (the keys of earlier benches stay as they were). So are a rubric's identity and its
    judge (:meth:`BenchConfig.rubric_key`): rubric-scored results never pool with plain ones, nor with
    another rubric's or judge's; a bench without a rubric adds nothing. So are the limits a bench budget
    played the env under (its reply length, turns and episode limit: :func:`env_limits`), so a
    shortened game never pools with the full one; an env no budget shortened adds nothing."""
    limits = env_limits(config, env_id) if env_id is not None else None
    settings: dict[str, JsonScalar] = {
        "max_tokens": limits.max_tokens if limits is not None else config.max_tokens,
        "temperature": config.temperature,
        "seed": config.seed,
    }
    if config.samples > 1:
        settings[SAMPLES_SETTING] = config.samples
    settings.update(config.rubric_key())
    if limits is not None:
        settings.update(limits.key_settings())
    return settings


def _renderer_name(config: BenchConfig) -> str:
    codec = config.local_model() or RendererConfig().model_name
    try:
        return RendererConfig(model_name=codec).resolved_renderer_name
    except Exception:
        return "unknown"
