"""Held-out evaluations episode by episode, and "before -> after" with bootstrap confidence intervals.

Every evaluation on the test split appends one row per episode to ``log_dir/eval_episodes.jsonl``
(step, episode index, return, stop reason and the env's episode metrics). The test split is the same
problems (same seeds) at every evaluation, so the first and the last evaluation of a run are paired:
:func:`compare_held_out` reports each one's mean with a percentile-bootstrap interval and the paired
change (resampling episodes, not evaluations), which is what a "reward went from A to B" claim needs.

Invariants: rows of one evaluation share ``step``; ``index`` is the test problem's position, so a
row of the first and of the last evaluation with the same index played the same episode. A run with a
policy per role adds each row's ``seat`` and the ``policy`` that played it. A resumed
run drops rows at or past its checkpoint step (as ``metrics.jsonl`` does), so each evaluation appears
once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envsuite.core import TrajectoryGroup
from envsuite.rollouts import episode_metrics
from envsuite.trainers._metrics import read_rows

EVAL_EPISODES_FILE = "eval_episodes.jsonl"
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class Estimate:
    """A mean with a percentile-bootstrap interval over ``n`` values."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float

    def __str__(self) -> str:
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class HeldOutComparison:
    """One quantity on the held-out episodes at two evaluations of a run, and its paired change."""

    quantity: str
    before_step: int
    after_step: int
    before: Estimate
    after: Estimate
    change: Estimate
    """Mean of (after - before) over the episodes both evaluations played."""

    def __str__(self) -> str:
        return (
            f"{self.quantity}: {self.before} at step {self.before_step} -> {self.after} at step "
            f"{self.after_step}; change {self.change} (n={self.change.n}, "
            f"{round(self.change.confidence * 100)}% bootstrap CIs)"
        )


def mean_ci(
    values: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """The mean of ``values`` with a percentile-bootstrap interval (seeded: equal inputs, equal output)."""
    if not values:
        raise ValueError("no values to estimate a mean from")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    data = np.asarray(values, dtype=np.float64)
    if not np.isfinite(data).all():
        raise ValueError("values must be finite")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(n_resamples, data.size))
    means = data[picks].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Estimate(float(data.mean()), float(low), float(high), int(data.size), confidence)


def eval_rows(
    groups_P: Sequence[TrajectoryGroup],
    indices_P: Sequence[int],
    step: int,
    envs_P: Sequence[str] | None = None,
    rungs_P: Sequence[int | None] | None = None,
) -> list[dict[str, object]]:
    """One row per held-out episode, indexed by its test problem (and member, if a group has several);
    with ``envs_P`` (a multi-env run's, or one with held-out rungs) each row names its env, and a row
    of a per-rung set its ``rung``."""
    rows: list[dict[str, object]] = []
    for position, (group, problem) in enumerate(zip(groups_P, indices_P, strict=True)):
        size = len(group.trajectories_G)
        for member, (trajectory, total) in enumerate(
            zip(group.trajectories_G, group.get_total_rewards(), strict=True)
        ):
            metrics = {k: float(v) for k, v in episode_metrics(trajectory).items() if k != "reward"}
            stop = str(trajectory.stop_reason or "none")
            rows.append(
                {
                    "step": step,
                    "index": problem * size + member,
                    "reward": float(total),
                    "stop": stop,
                    "metrics": metrics,
                }
                | ({"env": envs_P[position]} if envs_P is not None else {})
                | (
                    {"rung": rungs_P[position]}
                    if rungs_P is not None and rungs_P[position] is not None
                    else {}
                )
            )
    return rows


def append_eval_rows(log_dir: Path, rows: Sequence[dict[str, object]]) -> None:
    """Append rows to ``log_dir/eval_episodes.jsonl`` (flushed, like ``metrics.jsonl``)."""
    path = log_dir / EVAL_EPISODES_FILE
    with path.open("a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_eval_rows(log_dir: Path) -> list[dict[str, object]]:
    """The episode rows of a run (a torn last line, from a kill mid-write, is skipped)."""
    return read_rows(log_dir / EVAL_EPISODES_FILE)


def truncate_eval_rows(log_dir: Path, next_step: int) -> None:
    """Keep only evaluations before ``next_step`` (a resumed run redoes the later ones)."""
    path = log_dir / EVAL_EPISODES_FILE
    if not path.exists():
        return
    kept = [row for row in read_eval_rows(log_dir) if _int(row.get("step")) < next_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in kept), encoding="utf-8")
    os.replace(tmp, path)


def episode_value(row: dict[str, object], quantity: str) -> float:
    """``reward``, an episode metric, or a ``+``-joined sum of metrics (``win+draw``); missing is 0."""
    if quantity == "reward":
        return float(row["reward"])  # type: ignore[arg-type]
    metrics = row.get("metrics")
    values = metrics if isinstance(metrics, dict) else {}
    return float(sum(float(values.get(name.strip(), 0.0)) for name in quantity.split("+")))


def compare_held_out(
    log_dir: Path | str,
    quantity: str = "reward",
    *,
    before_step: int | None = None,
    after_step: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    env: str | None = None,
    rung: int | None = None,
    policy: str | None = None,
) -> HeldOutComparison:
    """The first (or ``before_step``) vs the last (or ``after_step``) evaluation of a run, on its own
    held-out sets; ``env`` keeps one env's episodes (a multi-env run's: ``reasoning_gym/chain_sum``),
    ``rung`` the episodes of that rung's set (``eval_rungs``) instead, ``policy`` those a policy of a
    run with a policy per role played (its seats' episodes)."""
    by_step: dict[int, dict[int, dict[str, object]]] = {}
    for row in read_eval_rows(Path(log_dir)):
        if (env is not None and row.get("env") != env) or row.get("rung") != rung:
            continue
        if policy is not None and row.get("policy") != policy:
            continue
        by_step.setdefault(_int(row.get("step")), {})[_int(row.get("index"))] = row
    if len(by_step) < 2 and (before_step is None or after_step is None or before_step == after_step):
        raise ValueError(f"{log_dir} has {len(by_step)} held-out evaluation(s); a comparison needs two")
    before = min(by_step) if before_step is None else before_step
    after = max(by_step) if after_step is None else after_step
    for step in (before, after):
        if step not in by_step:
            raise ValueError(f"no held-out evaluation at step {step}; evaluated at {sorted(by_step)}")
    first, last = by_step[before], by_step[after]
    shared = sorted(set(first) & set(last))
    if not shared:
        raise ValueError(f"evaluations at steps {before} and {after} share no episode")

    def estimate(values: Sequence[float]) -> Estimate:
        return mean_ci(values, confidence=confidence, n_resamples=n_resamples)

    before_values = [episode_value(first[i], quantity) for i in sorted(first)]
    after_values = [episode_value(last[i], quantity) for i in sorted(last)]
    deltas = [episode_value(last[i], quantity) - episode_value(first[i], quantity) for i in shared]
    return HeldOutComparison(
        quantity, before, after, estimate(before_values), estimate(after_values), estimate(deltas)
    )


def _int(value: object) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return -1
