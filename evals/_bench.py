"""``envsuite bench``: one model or checkpoint across catalog envs, as Inspect runs, into the leaderboard.

Phases: resolve the model and envs -> run an Inspect eval set (one task per env; Inspect shows progress
and writes ordinary logs) -> import every log into the result store -> rank.

Resume: logs go to a directory named after the model and settings, and ``eval_set`` reuses finished
work there, so a run that is killed and started again does not redo finished samples. Importing a log
is idempotent (keyed by the Inspect eval id and sample), so re-importing after a resume adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envsuite import RendererConfig, catalog_reward_ranges
from envsuite.models import KNOWN_MODELS
from envsuite.registration import EnvKind, registry, spec

DEFAULT_LOG_ROOT = "runs/bench"


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
    log_root: str = DEFAULT_LOG_ROOT
    db: str | None = None
    """Leaderboard store (path or URL); None: the default store."""
    display: str = "auto"
    """Inspect display: ``auto`` (rich in a terminal, plain otherwise), ``full``, ``plain``, ``none``."""
    max_samples: int = 64
    """Samples in flight per task; many in flight let the local sampler batch them."""
    label: str | None = None
    """Name shown on the leaderboard (default: the model name)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError("episodes must be >= 1")

    def resolved_env_ids(self) -> list[str]:
        if not self.env_ids or self.env_ids == ("all",):
            return [s.id for s in registry.all_specs() if not s.unavailable and not s.deprecated]
        return [spec(env_id).id for env_id in self.env_ids]

    def inspect_model(self) -> str:
        """The Inspect model name: envsuite models go through the ``envsuite`` provider."""
        if self.model in KNOWN_MODELS or Path(self.model).expanduser().is_dir():
            return f"envsuite/{Path(self.model).expanduser().resolve() if Path(self.model).exists() else self.model}"
        return self.model

    def log_dir(self) -> Path:
        settings = {k: v for k, v in asdict(self).items() if k not in ("display", "db", "log_root", "label")}
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
    return "full" if sys.stdout.isatty() else "plain"


def run_bench(config: BenchConfig) -> BenchReport:
    """Run the benchmark, import its logs into the store, and return what happened."""
    from inspect_ai import eval_set

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
        )
        for env_id in env_ids
    ]
    report = BenchReport(log_dir=config.log_dir())
    report.log_dir.mkdir(parents=True, exist_ok=True)
    success, logs = eval_set(
        tasks,
        log_dir=str(report.log_dir),
        model=config.inspect_model(),
        display=_display(config),  # type: ignore[arg-type]
        max_samples=config.max_samples,
        max_connections=config.max_samples,
        retry_attempts=1,
        fail_on_error=False,
        log_format="eval",
        # Flush every finished sample, so a killed run loses at most the samples in flight.
        log_buffer=1,
    )
    report.completed = bool(success)
    for log in logs:
        report.log_paths.append(str(log.location))
        added = import_log(log.location, config)
        report.runs_added += added[0]
        report.episodes_added += added[1]
    return report


def _renderer_name(config: BenchConfig) -> str:
    model = config.inspect_model()
    codec = model.removeprefix("envsuite/") if model.startswith("envsuite/") else RendererConfig().model_name
    try:
        return RendererConfig(model_name=codec).resolved_renderer_name
    except Exception:
        return "unknown"


def import_log(log_path: str, config: BenchConfig) -> tuple[int, int]:
    """Add one Inspect log's samples to the store; returns (runs added, episodes added)."""
    from inspect_ai.log import read_eval_log

    import envsuite
    from envsuite.leaderboard import EpisodeResult, MatchResult, ResultKey, ResultStore, RunRecord

    log = read_eval_log(log_path)
    metadata: dict[str, Any] = dict(log.eval.metadata or {})
    env_id = str((log.eval.task_args or {}).get("env_id") or metadata.get("env_id"))
    env_spec = spec(env_id)
    episodes = []
    partners: set[str] = set()
    for sample in log.samples or []:
        if sample.scores is None or not sample.scores:
            continue
        score = next(iter(sample.scores.values()))
        value = score.value if isinstance(score.value, dict) else {"reward": 0.0, "success": 0.0}
        meta = dict(score.metadata or {})
        partners.add(str(meta.get("partner") or "builtin"))
        episodes.append(
            EpisodeResult(
                seed=int((sample.metadata or {})["seed"]),
                reward=float(value.get("reward", 0.0)),
                success=float(value.get("success", 0.0)) >= 0.5,
                epoch=int(sample.epoch),
                metrics={k: float(v) for k, v in dict(meta.get("metrics") or {}).items()},
                transcript_ref=f"{log_path}#{sample.id}",
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
        config={"episodes": config.episodes, "env_id": env_spec.id, "model": config.inspect_model()},
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
        log_root=args.log_dir,
        db=args.db,
        label=args.label,
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
