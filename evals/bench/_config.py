"""What an ``envsuite bench`` run is: its settings (:class:`BenchConfig`, which also names its log
directory), its report, and the check of the model before anything is written."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envsuite import DEFAULT_MODEL, select_envs
from envsuite.display import printable
from envsuite.errors import UsageError
from envsuite.evals._rubric import RubricSettings
from envsuite.evals.bench._budget import FULL, check_budget
from envsuite.executors import ExecutorConfig
from envsuite.models import KNOWN_MODELS, is_checkpoint_dir

DEFAULT_LOG_ROOT = "runs/bench"
DEFAULT_EPISODE_TIMEOUT_S = 600.0
RUNNERS = ("auto", "inspect", "direct")


@dataclass(frozen=True)
class BenchConfig:
    """What to benchmark and how. Small and serializable; it names the log directory."""

    model: str
    """An envsuite model (known name, HF dir or checkpoint dir) or any Inspect model (``openai/...``)."""
    env_ids: tuple[str, ...] = ()
    """What to play, as ``envsuite list`` reads it: ids, ``family:NAME``, ``tag:NAME``, globs
    (``textarena/*``), ``all``, ``!PATTERN`` to leave out; empty means every available env."""
    episodes: int = 20
    samples: int = 1
    """Plays of each episode (an env and episode seed: one problem), each with its own sampling seed
    (derived from :attr:`seed`); above 1 the leaderboard reports pass@k over the plays (docs/evals.md)."""
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
    runner: str = "auto"
    """``inspect`` (an Inspect eval set: one Inspect sample per episode), ``direct`` (envsuite plays the
    episodes and writes each env as an Inspect log: an envsuite model only; see ``evals.direct._runner``), or
    ``auto``: direct for envsuite models, Inspect for every other model."""
    rubric: dict[str, Any] | None = None
    """A rubric (as :meth:`~envsuite.rubrics.Rubric.to_dict` writes it) that also scores every episode's
    final reply, its reward added to the env's (``evals._rubric``); None: the env's reward alone."""
    judge: str = DEFAULT_MODEL
    """The local model judging the rubric's judge criteria."""
    judge_cache: str | None = None
    """SQLite file caching the judge's verdicts, so a rerun of the same replies asks the judge nothing."""
    budget: str = FULL
    """Turn caps, reply lengths and episode limits per env (``evals.bench._budget``): ``full`` (none:
    every env as it is) or ``small`` (multi-turn envs fitted to what a small model finishes; recorded in
    the result key of each env it shortens)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise UsageError("episodes must be >= 1")
        if self.samples < 1:
            raise UsageError("samples must be >= 1 (plays of each episode)")
        if self.episode_timeout_s is not None and not self.episode_timeout_s > 0:
            raise UsageError("episode_timeout_s must be > 0 (or None for no bound)")
        if self.runner not in RUNNERS:
            raise UsageError(f"unknown runner {self.runner!r}; choose one of {', '.join(RUNNERS)}")
        if self.runner == "direct" and self.local_model() is None:
            raise UsageError(
                f"the direct runner plays envsuite models only; {self.model!r} runs with Inspect"
            )
        check_budget(self.budget)
        rubric = self.rubric_settings()
        if rubric is not None:
            rubric.parsed()  # a UsageError saying what is wrong with it, before anything runs

    def rubric_settings(self) -> RubricSettings | None:
        """What scores the episodes besides the env (None without a rubric)."""
        if self.rubric is None:
            return None
        return RubricSettings(self.rubric, self.judge, self.judge_cache)

    def rubric_key(self) -> dict[str, str]:
        """What the result key records of the rubric: its identity and its judge (``none`` for a rubric
        without judge criteria); nothing without a rubric, so such keys stay as they were."""
        rubric = self.rubric_settings()
        if rubric is None:
            return {}
        parsed = rubric.parsed()
        return {"rubric": parsed.identity(), "judge": rubric.judge if parsed.has_judge else "none"}

    def resolved_runner(self) -> str:
        """``inspect`` or ``direct``: what ``auto`` means for this model."""
        if self.runner != "auto":
            return self.runner
        return "direct" if self.local_model() is not None else "inspect"

    def resolved_env_ids(self) -> list[str]:
        """The versioned ids :attr:`env_ids` selects, in order (a pattern matching nothing, or an unknown
        id, is a UsageError naming what there is)."""
        return [s.id for s in select_envs(self.env_ids or ("all",))]

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
        # None of these changes a result.
        ignored = ("display", "db", "log_root", "label", "executor", "runner", "judge_cache")
        settings = {k: v for k, v in asdict(self).items() if k not in ignored}
        del settings["rubric"], settings["judge"]  # a bench without a rubric keeps its old name
        settings |= self.rubric_key()
        if self.samples == 1:  # one sample per episode, as before the setting existed: the same names
            del settings["samples"]
        if self.budget == FULL:  # as before budgets existed: the same names
            del settings["budget"]
        settings["env_ids"] = self.resolved_env_ids()
        if self.resolved_runner() == "direct":  # its logs differ; Inspect runs keep their old names
            settings["runner"] = "direct"
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
    failed_envs: dict[str, str] = field(default_factory=dict)
    """Envs that did not finish, and why (reported and skipped; a rerun plays them)."""


def display_mode(config: BenchConfig) -> str:
    """The display this run uses (``auto`` resolved by whether stdout is a terminal)."""
    if config.display != "auto":
        return config.display
    return "full" if sys.stdout.isatty() else "lines"


def _short_name(path: Path) -> str:
    """A readable name for a model directory: its last three path parts (``<run>/weights/step000012``)."""
    return "/".join(path.parts[-3:])


def check_model(model: str) -> None:
    """Raise a UsageError saying what is wrong with ``model`` (before anything is written).

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
            raise UsageError(f"{model!r} is a directory but not a model or checkpoint (no config.json in it)")
        return
    if model.startswith((".", "/", "~")) or path.exists():
        raise UsageError(f"no model directory at {model!r}")
    if "/" not in model:
        close = difflib.get_close_matches(model, list(KNOWN_MODELS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise UsageError(
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
        raise UsageError(
            f"cannot use the Inspect model {model!r}: {reason} (envsuite models need no key: {known})"
        ) from None


def _plain(message: str) -> str:
    """An exception message without rich markup or blank lines, on at most three lines."""
    text = re.sub(r"\[/?[a-zA-Z][\w .#-]*\]", "", message)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return printable(" ".join(lines[:3]))
