"""Per-step numbers and the ``metrics.jsonl`` file they go to (one row per step, never duplicated).

Rows are appended and flushed to disk as each step finishes. On resume, :func:`truncate_after`
drops every row at or past the checkpoint's step, so a run killed at any moment ends with each step
exactly once.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from envsuite.core import STOP_METRIC_PREFIX, Metrics, TrajectoryGroup
from envsuite.rollouts import episode_metrics
from envsuite.trainers._datums import TrainingDatum

Row = dict[str, float | int | str]
ENV_METRIC_PREFIX = "env/"
"""Per-step means of the env's episode metrics are logged as ``env/<name>`` (``test/env/<name>``)."""
SUCCESS_KEYS = ("correct", "success")
"""Episode metrics read as success, first present wins."""


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def _std(values: Sequence[float]) -> float:
    return float(np.std(values)) if values else float("nan")


def episode_summary(groups: Sequence[TrajectoryGroup], prefix: str = "") -> Row:
    """Reward, success, format, tokens per turn, entropy estimate and stop-reason shares."""
    rewards: list[float] = []
    success: list[float] = []
    formats: list[float] = []
    turns = ac_tokens = 0
    logprobs: list[float] = []
    stops: Counter[str] = Counter()
    env_sums: dict[str, float] = {}
    for group in groups:
        rewards.extend(group.get_total_rewards())
        group_metrics_G = group.metrics_G
        if len(group_metrics_G) != len(group.trajectories_G):
            group_metrics_G = [{} for _ in group.trajectories_G]
        for trajectory, group_metrics in zip(group.trajectories_G, group_metrics_G, strict=True):
            metrics = episode_metrics(trajectory)
            # The group's own numbers (a rubric's criteria, a game's outcome) count as the episode's.
            for name, value in [*_env_metrics(metrics).items(), *_env_metrics(group_metrics).items()]:
                env_sums[name] = env_sums.get(name, 0.0) + value
            key = next((k for k in SUCCESS_KEYS if k in metrics), None)
            if key is not None:
                success.append(float(metrics[key] > 0))
            if "format" in metrics:
                formats.append(float(metrics["format"] > 0))
            turns += int(metrics["turns"])
            ac_tokens += int(metrics["ac_tokens"])
            stops[str(trajectory.stop_reason or "none")] += 1
            for transition in trajectory.transitions:
                logprobs.extend(transition.ac.maybe_logprobs or [])
    n_episodes = sum(stops.values())
    row: Row = {
        f"{prefix}reward/mean": _mean(rewards),
        f"{prefix}reward/std": _std(rewards),
        f"{prefix}episodes": n_episodes,
        f"{prefix}tokens_per_turn": ac_tokens / turns if turns else 0.0,
        f"{prefix}entropy": -_mean(logprobs) if logprobs else float("nan"),
    }
    if success:
        row[f"{prefix}success"] = _mean(success)
    if formats:
        row[f"{prefix}format"] = _mean(formats)
    for reason, count in sorted(stops.items()):
        row[f"{prefix}{STOP_METRIC_PREFIX}{reason}"] = count / n_episodes
    for name, total in sorted(env_sums.items()):
        row[f"{prefix}{ENV_METRIC_PREFIX}{name}"] = total / n_episodes
    return row


def _env_metrics(metrics: Metrics) -> dict[str, float]:
    """The env's own per-episode numbers (win, invalid_moves, questions_asked, ...), summed over steps.

    Every episode counts for every name (absent: 0), so a mean over episodes is a rate per episode.
    """
    return {
        k: float(v)
        for k, v in metrics.items()
        if k not in ("reward", "turns", "ac_tokens") and not k.startswith(STOP_METRIC_PREFIX)
    }


def kl_metrics(datums: Sequence[TrainingDatum], train_logprobs: Sequence[np.ndarray]) -> Row:
    """Sampler-vs-learner KL estimates over action tokens: v1 = E[s - t], v2 = E[(s - t)^2 / 2]."""
    diffs = [(d.sampler_logprobs_T - lp)[d.mask_T > 0] for d, lp in zip(datums, train_logprobs, strict=True)]
    flat = np.concatenate(diffs) if diffs else np.zeros(0)
    if flat.size == 0:
        return {}
    return {"kl_sample_train_v1": float(flat.mean()), "kl_sample_train_v2": float(0.5 * (flat**2).mean())}


class MetricsLog:
    """Appends one JSON row per step to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, row: Row) -> None:
        line = json.dumps({k: _finite_or_none(v) for k, v in row.items()}, sort_keys=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def rows(self) -> list[dict[str, object]]:
        return read_rows(self.path)


def _finite_or_none(value: float | int | str) -> float | int | str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_rows(path: Path) -> list[dict[str, object]]:
    """The rows of a metrics file; a torn last line (killed mid-write) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def truncate_after(path: Path, next_step: int) -> None:
    """Keep only rows with ``step < next_step`` (and drop torn lines), rewriting the file atomically."""
    kept = [row for row in read_rows(path) if (step := _step_of(row)) is not None and step < next_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in kept), encoding="utf-8")
    os.replace(tmp, path)


def _step_of(row: dict[str, object]) -> int | None:
    step = row.get("step")
    return step if isinstance(step, int) else None
