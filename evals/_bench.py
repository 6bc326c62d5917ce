"""``envsuite bench``: one model or checkpoint across catalog envs, as Inspect runs, into the leaderboard.

Phases: check the model (before anything is written) -> resolve the envs -> run an Inspect eval set
(one task per env, Inspect writes ordinary logs) -> import each task's log into the result store as
the task ends -> rank.

Resume: logs go to a directory named after the model and settings, and ``eval_set`` reuses finished
work there, so a run that is killed and started again does not redo finished samples. Each env is
stored as soon as its task ends, so a killed bench keeps every finished env. Importing a log is
idempotent (keyed by the Inspect eval id and sample), so re-importing after a resume adds nothing.

Every episode has a wall-clock bound (``episode_timeout_s``, 600 s by default): a model that never
stops a turn makes a multi-turn env (twenty questions: up to 20 turns of ``max_tokens`` each) take
minutes per episode, and no episode of a task finishes before its last turn. An episode past the bound
is scored with what it earned so far and ``stop_reason: rollout_timeout``.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envsuite import RendererConfig, catalog_reward_ranges
from envsuite.display import printable
from envsuite.evals._workers import bench_workers
from envsuite.executors import ExecutorConfig
from envsuite.models import KNOWN_MODELS, is_checkpoint_dir
from envsuite.registration import EnvKind, registry, spec

if TYPE_CHECKING:
    from inspect_ai.scorer import Score

DEFAULT_LOG_ROOT = "runs/bench"
DEFAULT_EPISODE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BenchConfig:
    """What to benchmark and how. Small and serializable; it names the log directory."""

    model: str
    """An envsuite model (known name, HF dir or checkpoint dir) or any Inspect model (``openai/...``)."""
    env_ids: tuple[str, ...] = ()
    """Catalog ids; empty means every available env."""
    episodes: int = 20
    seed: int = 0
    max_tokens: int = 256
    temperature: float = 0.7
    partner: str | None = None
    """An Inspect model name to use as partner/opponent (default: each env's built-in one)."""
    base_url: str | None = None
    """Sample the envsuite model through the Tinker API at this URL (e.g. an ``envsuite serve``)."""
    log_root: str = DEFAULT_LOG_ROOT
    db: str | None = None
    """Leaderboard store (path or URL); None: the default store."""
    display: str = "auto"
    """``auto`` (Inspect's rich display in a terminal, else ``lines``), ``lines`` (a line per finished
    quarter of an env's episodes, naming the env), Inspect's ``full`` or ``plain``, or ``none``."""
    max_samples: int = 64
    """Samples in flight per task; many in flight let the local sampler batch them."""
    label: str | None = None
    """Name shown on the leaderboard (default: the model name)."""
    episode_timeout_s: float | None = DEFAULT_EPISODE_TIMEOUT_S
    """Wall-clock bound on one episode (None: unbounded); past it the episode is a ``rollout_timeout``."""
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    """Where the envs play (in process, a process pool, Ray); the model stays with Inspect here."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")
        if self.episode_timeout_s is not None and not self.episode_timeout_s > 0:
            raise ValueError("episode_timeout_s must be > 0 (or None for no bound)")

    def resolved_env_ids(self) -> list[str]:
        if not self.env_ids or self.env_ids == ("all",):
            return [s.id for s in registry.all_specs() if not s.unavailable and not s.deprecated]
        return [spec(env_id).id for env_id in self.env_ids]

    def local_model(self) -> str | None:
        """The envsuite model to load (a known name or a directory's absolute path); None for other
        Inspect models."""
        if self.model in KNOWN_MODELS:
            return self.model
        if self.model.startswith("envsuite/"):
            return self.model.removeprefix("envsuite/")
        path = Path(self.model).expanduser()
        return str(path.resolve()) if path.is_dir() else None

    def inspect_model(self) -> str:
        """The Inspect model name: ``envsuite/<name>`` for envsuite models. A directory is named by its
        label (or its last path parts), never ``envsuite//abs/path``; its path goes in :meth:`model_args`."""
        local = self.local_model()
        if local is None:
            return self.model
        if local in KNOWN_MODELS or not Path(local).is_absolute():
            return f"envsuite/{local}"
        return f"envsuite/{self.label or _short_name(Path(local))}"

    def model_args(self) -> dict[str, str]:
        local = self.local_model()
        return {"path": local} if local is not None and Path(local).is_absolute() else {}

    def log_dir(self) -> Path:
        ignored = ("display", "db", "log_root", "label", "executor")  # none of them changes a result
        settings = {k: v for k, v in asdict(self).items() if k not in ignored}
        settings["env_ids"] = self.resolved_env_ids()
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.label or self.model)[-48:]
        return Path(self.log_root) / f"{slug}-{digest}"


@dataclass
class BenchReport:
    """What a bench run did: its logs and how many rows reached the store."""

    log_dir: Path
    log_paths: list[str] = field(default_factory=list)
    runs_added: int = 0
    episodes_added: int = 0
    completed: bool = False


def _display(config: BenchConfig) -> str:
    if config.display != "auto":
        return config.display
    return "full" if sys.stdout.isatty() else "lines"


def _short_name(path: Path) -> str:
    """A readable name for a model directory: its last three path parts (``<run>/weights/step000012``)."""
    return "/".join(path.parts[-3:])


def check_model(model: str) -> None:
    """Raise ValueError saying what is wrong with ``model`` (before anything is written).

    Accepted: an envsuite model name, a model or checkpoint directory, or an Inspect model
    ``provider/name`` whose provider is installed and configured (its API key set, for hosted ones).
    """
    known = ", ".join(sorted(KNOWN_MODELS))
    if model in KNOWN_MODELS:
        return
    if model.startswith("envsuite/"):
        return check_model(model.removeprefix("envsuite/"))
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not is_checkpoint_dir(model):
            raise ValueError(f"{model!r} is a directory but not a model or checkpoint (no config.json in it)")
        return
    if model.startswith((".", "/", "~")) or path.exists():
        raise ValueError(f"no model directory at {model!r}")
    if "/" not in model:
        close = difflib.get_close_matches(model, list(KNOWN_MODELS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise ValueError(
            f"unknown model {model!r}{hint} Use an envsuite model ({known}), a model or checkpoint "
            "directory, or an Inspect model written provider/name (e.g. openai/gpt-4o-mini, hf/<hub id>)"
        )
    _check_inspect_model(model, known)


def _check_inspect_model(model: str, known: str) -> None:
    from inspect_ai.model import get_model

    try:
        get_model(model)
    except Exception as exc:
        reason = _plain(str(exc)) or type(exc).__name__
        raise ValueError(
            f"cannot use the Inspect model {model!r}: {reason} (envsuite models need no key: {known})"
        ) from None


def _plain(message: str) -> str:
    """An exception message without rich markup or blank lines, on at most three lines."""
    text = re.sub(r"\[/?[a-zA-Z][\w .#-]*\]", "", message)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return printable(" ".join(lines[:3]))


def run_bench(config: BenchConfig) -> BenchReport:
    """Check the model, run the benchmark storing each env as its task ends, and report what happened."""
    check_model(config.model)
    from inspect_ai import eval_set

    # Imported only now: registering the hooks makes Inspect print a banner on its next use.
    from envsuite.evals._bench_progress import BenchSession, bench_session, print_line
    from envsuite.evals._provider import forget_cached_conversations, models_released_after
    from envsuite.evals._task import envsuite_env

    env_ids = config.resolved_env_ids()
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
        for env_id in env_ids
    ]
    report = BenchReport(log_dir=config.log_dir())
    display = _display(config)
    session = BenchSession(
        label=config.label or config.inspect_model().removeprefix("envsuite/"),
        on_log=lambda location: import_log(location, config),
        say=print_line if display == "lines" else None,
        # Inspect runs the envs' tasks side by side: once one ends, the KV of its conversations would
        # only sit in the prefix cache next to the others' batches (envsuite bench's 2 GB memory goal).
        # The others' running conversations lose theirs too and prefill their history once more.
        after_task=forget_cached_conversations,
    )
    report.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        # A model this run loaded (and its caches) is not kept past it.
        with bench_session(session), bench_workers(config.executor), models_released_after():
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
    finally:
        with contextlib.suppress(OSError):
            report.log_dir.rmdir()  # only when nothing was written (rmdir refuses a non-empty one)
    report.completed = bool(success)
    for log in logs:
        report.log_paths.append(str(log.location))
        if log.status == "success":
            session.import_once(str(log.location))
    report.runs_added, report.episodes_added = session.runs_added, session.episodes_added
    return report


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
