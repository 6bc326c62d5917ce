"""``envsuite bench``'s direct runner: envsuite models play the episodes here, and each env is written as
an ordinary Inspect log.

Why it exists: Inspect's per-sample machinery (a task state copied per sample, transcript events sent to
a realtime database, a log flush per finished sample) costs ~12 ms a sample on a 2-core machine, as much
as a whole tiny-model episode, so a bench of one Inspect sample per episode took 4.3x a bare rollout loop,
against 1.05x for this runner (``bench/eval_overhead.py``, docs/benchmarks.md). For envsuite models
(loaded in this process, or behind a Tinker URL) the bench therefore plays each episode with the code
Inspect's solver runs
(:func:`~envsuite.evals._task.run_episode`), samples with the same settings (the same tokens for the same
prompt and seed), scores with the same function, and writes one Inspect log per env, which ``inspect
view`` reads and the leaderboard imports like any other. What such a log lacks is Inspect's event
transcript (spans, model-call events); messages, output, scores, usage and timings are in it.
``--runner inspect`` runs envsuite models through Inspect's eval set instead; other models always do.

Never loses a run: each finished episode is appended to its env's journal (``direct_<env>.jsonl``, one
flushed line per episode) before it counts. A rerun of the same bench reads the journal and plays only
the episodes not in it. When an env's last episode is in, its log is written, the journal removed, and
the episodes played are stored (``evals.bench._rows``; the log is not read back). An episode whose model call fails is retried once; failing again, it leaves the
env's log written with status ``error`` (not imported; the journal stays), so a rerun plays only it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from envsuite import RendererConfig
from envsuite.catalog.registration import spec
from envsuite.core import Message
from envsuite.evals._messages import as_inspect_sees, from_inspect_call, tools_of
from envsuite.evals._provider import inspect_calls, local_model, sample, sampling_params
from envsuite.evals._task import (
    EpisodeOutcome,
    EpisodeResult,
    EpisodeTask,
    ModelReply,
    episode_seeds,
    new_result,
    run_episode,
    run_in_pool,
    sample_seed,
    score_episode,
)
from envsuite.evals._workers import active_pool
from envsuite.evals.bench._budget import EnvLimits, env_limits
from envsuite.evals.direct._log import EpisodeRecord, Play, write_env_log

if TYPE_CHECKING:
    import tinker

    from envsuite.evals.bench._config import BenchConfig
    from envsuite.evals.bench._progress import BenchSession
    from envsuite.evals.bench._rows import BenchRecorder

MODEL_ATTEMPTS = 2
"""Tries per episode when the model call fails (Inspect's eval set retries a failed sample once too)."""


@dataclass
class EnvRun:
    """One env of a direct bench: its seeds, the plays finished so far, and where they are kept."""

    env_id: str
    seeds: list[int]
    samples: int
    """Plays of each seed (``BenchConfig.samples``)."""
    journal: Path
    eval_id: str
    """The log's eval id (the store keys the run by it); kept in the journal's first line, so a resumed
    env is one run."""
    started_at: str
    log_path: Path
    """Named as Inspect names its logs (timestamp first), which ``inspect view`` needs to list a
    ``.json`` log."""
    finished_log: Path | None = None
    """The successful log an earlier bench wrote for this env: nothing is left to play."""
    records: dict[Play, EpisodeRecord] = field(default_factory=dict)
    failures: dict[Play, EpisodeRecord] = field(default_factory=dict)
    _journal: TextIO | None = field(default=None, repr=False)

    @property
    def plays(self) -> list[Play]:
        """Every play of the env, episode by episode."""
        return [Play(seed, epoch) for seed in self.seeds for epoch in range(1, self.samples + 1)]

    def pending(self) -> list[Play]:
        return [play for play in self.plays if play not in self.records]

    def open_journal(self) -> None:
        """Start the journal with its header, or end a line a kill cut short so appends start clean."""
        if not self.journal.is_file() or self.journal.stat().st_size == 0:
            header = {"eval_id": self.eval_id, "started_at": self.started_at}
            self.journal.write_text(json.dumps(header) + "\n", encoding="utf-8")
            return
        with self.journal.open("rb+") as journal:
            journal.seek(-1, 2)
            if journal.read(1) != b"\n":
                journal.write(b"\n")

    def keep(self, record: EpisodeRecord) -> None:
        """Journal a finished episode (flushed before it counts), or hold a failed one for the log."""
        if record.error is not None:
            self.failures[record.play] = record
            return
        if self._journal is None:
            self._journal = self.journal.open("a", encoding="utf-8")
        # Flushed to the OS before the episode counts: a killed process loses no journaled line (a
        # machine that loses power may lose the last few; an fsync per episode would cost more than the
        # episode does with a small model).
        self._journal.write(json.dumps(asdict(record)) + "\n")
        self._journal.flush()
        self.records[record.play] = record

    def close_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def env_runs(
    config: BenchConfig,
    log_dir: Path,
    env_ids: list[str],
    on_error: Callable[[str, str], None] | None = None,
) -> list[EnvRun]:
    """Each env's run, resumed from its journal where an earlier bench left one. An env whose run cannot
    be set up (an unreadable log of an earlier run, say) is left out and passed to ``on_error`` with
    the reason."""
    runs = []
    for env_id in env_ids:
        try:
            runs.append(_env_run(config, log_dir, env_id))
        except Exception as exc:
            if on_error is None:
                raise
            on_error(env_id, f"{type(exc).__name__}: {exc}"[:300])
    return runs


def _env_run(config: BenchConfig, log_dir: Path, env_id: str) -> EnvRun:
    versioned = spec(env_id).id
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", versioned)  # namespaced ids hold a "/"
    journal = log_dir / f"direct_{stem}.jsonl"
    header, records = _read_journal(journal)
    stamp = header.get("started_at")
    started = datetime.fromisoformat(stamp) if isinstance(stamp, str) else _now()
    eval_id = str(header.get("eval_id") or uuid.uuid4().hex[:22])
    return EnvRun(
        env_id=versioned,
        seeds=episode_seeds(versioned, config.episodes, config.seed),
        samples=config.samples,
        journal=journal,
        eval_id=eval_id,
        started_at=_iso(started),
        log_path=log_dir / f"{started.strftime('%Y-%m-%dT%H-%M-%S-00-00')}_{stem}_{eval_id}.json",
        finished_log=None if journal.is_file() else _finished_log(log_dir, stem, versioned),
        records=records,
    )


def _finished_log(log_dir: Path, stem: str, env_id: str) -> Path | None:
    """The successful direct log of ``env_id`` in ``log_dir``, if an earlier bench finished it (read before
    the bench's event loop starts, so Inspect's synchronous reader is safe here)."""
    from inspect_ai.log import read_eval_log

    for candidate in sorted(log_dir.glob(f"*_{stem}_*.json"), reverse=True):
        header = read_eval_log(str(candidate), header_only=True)
        if header.status == "success" and (header.eval.task_args or {}).get("env_id") == env_id:
            return candidate
    return None


def _read_journal(journal: Path) -> tuple[dict[str, object], dict[Play, EpisodeRecord]]:
    """A journal's header and its plays (none where there is no journal)."""
    if not journal.is_file():
        return {}, {}
    lines = [line for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()]
    header: dict[str, object] = {}
    records: dict[Play, EpisodeRecord] = {}
    for number, line in enumerate(lines):
        try:
            entry = json.loads(line)
            if number == 0 and "eval_id" in entry:
                header = entry
            else:
                record = EpisodeRecord(**entry)
                records[record.play] = record
        except (json.JSONDecodeError, TypeError):
            continue  # a line cut short by a kill: that episode is played again
    return header, records


class DirectBench:
    """Plays every pending episode of the bench's envs through one gate of ``max_samples`` in flight
    (so the sampler's batches stay full across envs), finishing each env as its last episode ends."""

    def __init__(
        self,
        config: BenchConfig,
        recorder: BenchRecorder,
        session: BenchSession,
        on_episode: Callable[[EnvRun], None] | None = None,
    ) -> None:
        model = config.local_model()
        if model is None:
            raise ValueError(f"the direct runner plays envsuite models only, not {config.model!r}")
        self.config = config
        self.recorder = recorder
        self.session = session
        self.on_episode = on_episode
        self.model = local_model(model, config.base_url)
        self.renderer = RendererConfig(model_name=model)
        self.rubric = config.rubric_settings()
        self.params = sampling_params(
            self.model.renderer,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            seed=config.seed,
        )

    async def play(self, runs: list[EnvRun]) -> None:
        gate = asyncio.Semaphore(self.config.max_samples)
        for run in runs:
            run.open_journal()
            self.session.task_started(run.eval_id, run.env_id, len(run.plays))
            for record in run.records.values():  # resumed episodes count as played
                self.session.sample_ended(run.eval_id, record.reward, resumed=True)
        await asyncio.gather(*(self._play_env(run, gate) for run in runs))

    async def _play_env(self, run: EnvRun, gate: asyncio.Semaphore) -> None:
        """Play an env's pending episodes and finish it; anything that escapes (its log or the store
        failing) is reported, and the env skipped, never the end of the bench."""

        async def one(play: Play) -> None:
            async with gate:
                self.session.episode_started(run.eval_id)
                record = await self._episode(run.env_id, play)
            run.keep(record)
            if record.error is None:
                self.session.sample_ended(run.eval_id, record.reward)
            if self.on_episode is not None:
                self.on_episode(run)

        try:
            outcomes = await asyncio.gather(*(one(play) for play in run.pending()), return_exceptions=True)
            raised = next((o for o in outcomes if isinstance(o, BaseException)), None)
            if raised is not None:
                raise raised
            await self._finish(run)
        except Exception as exc:
            run.close_journal()
            self.session.task_failed(run.eval_id, f"error: {type(exc).__name__}: {exc}"[:300])

    async def _finish(self, run: EnvRun) -> None:
        """Write the env's log; when every episode is in, drop the journal and store what was played."""
        run.close_journal()
        complete = not run.pending()
        status: Literal["success", "error"] = "success" if complete else "error"
        ordered = [run.records.get(play) or run.failures[play] for play in run.plays]
        await write_env_log(
            self.config, run.env_id, run.eval_id, ordered, run.started_at, status, run.log_path
        )
        if not complete:
            self.session.task_failed(run.eval_id, status)
            return
        run.journal.unlink(missing_ok=True)  # the log now holds every episode
        await self.recorder.store_played(run.env_id, run.eval_id, str(run.log_path), ordered)
        self.session.task_ended(run.eval_id, run.log_path.name)

    async def _episode(self, env_id: str, play: Play) -> EpisodeRecord:
        limits = env_limits(self.config, env_id)
        task = EpisodeTask(env_id, play.seed, self.renderer, None, self.config.partner, limits.max_turns)
        record = await self._attempt(task, play.epoch, limits)
        for _ in range(MODEL_ATTEMPTS - 1):
            if record.error is None:
                break
            record = await self._attempt(task, play.epoch, limits)
        return record

    def _params(self, seed: int, epoch: int, max_tokens: int) -> tinker.SamplingParams:
        """The sampling settings of one play: the bench's own for the first, its own seed for others
        (as the Inspect runner's solver asks for each epoch); ``max_tokens`` is the env's (its budget's)."""
        play_seed = sample_seed(seed, epoch)
        if play_seed is None and max_tokens == self.config.max_tokens:
            return self.params
        return sampling_params(
            self.model.renderer,
            max_tokens=max_tokens,
            temperature=self.config.temperature,
            seed=self.config.seed if play_seed is None else play_seed,
        )

    async def _attempt(self, task: EpisodeTask, epoch: int, limits: EnvLimits) -> EpisodeRecord:
        """One try at a play of an episode: played to its end (and scored by the bench's rubric, if it
        has one), or cut at the episode time bound (scored as it stood), or failed by the model
        (recorded with the traceback)."""
        started_at, started = _iso(_now()), time.perf_counter()
        turns = _Turns(self, self._params(task.seed, epoch, limits.max_tokens))
        result = new_result()
        error = None
        try:
            outcome = await asyncio.wait_for(self._run(task, turns, result), limits.episode_timeout_s)
            result, conversation = outcome.result, outcome.conversation
            if self.rubric is not None:  # as the Inspect runner's solver scores a played episode
                await score_episode(self.rubric, result, conversation)
        except TimeoutError:
            conversation = turns.latest  # what the model saw last; ``result`` is what it earned so far
        except Exception:
            conversation, error = turns.latest, traceback.format_exc()
        return EpisodeRecord(
            seed=task.seed,
            result=result,
            conversation=conversation,
            answer=turns.answer,
            truncated=turns.truncated,
            started_at=started_at,
            completed_at=_iso(_now()),
            total_time=round(time.perf_counter() - started, 3),
            input_tokens=turns.input_tokens,
            output_tokens=turns.output_tokens,
            error=error,
            epoch=epoch,
        )

    async def _run(self, task: EpisodeTask, turns: _Turns, result: EpisodeResult) -> EpisodeOutcome:
        pool = active_pool()
        if pool is None:
            return await run_episode(task, turns, result)
        return await run_in_pool(pool, task, turns)


class _Turns:
    """The evaluated model's turns of one episode: the provider's sampling, without Inspect."""

    def __init__(self, bench: DirectBench, params: tinker.SamplingParams) -> None:
        self.bench = bench
        self.params = params
        self.latest: list[Message] = []
        self.answer = ""
        self.truncated = False
        self.input_tokens = self.output_tokens = 0

    async def __call__(self, messages: list[Message]) -> ModelReply:
        self.latest = list(messages)
        model = self.bench.model
        # Rendered as the provider renders what Inspect hands it (tools included), so both runners agree.
        seen, tools = as_inspect_sees(messages)
        prompt = model.renderer.build_generation_prompt(seen, tools=tools)
        response = await sample(model, prompt, 1, self.params)
        tokens = list(response.sequences[0].tokens)
        parsed = model.renderer.parse_response(tokens)
        self.input_tokens += prompt.length
        self.output_tokens += len(tokens)
        self.answer, self.truncated = str(parsed.message["content"]), not parsed.clean_stop
        self.latest = [*messages, parsed.message]
        # As the provider and the solver hand calls over in the Inspect runner, so both runners agree.
        calls = [from_inspect_call(c) for c in inspect_calls(parsed.message)] if tools_of(messages) else []
        return ModelReply(self.answer, self.truncated, calls)
