"""Derived views of a leaderboard: the model x env matrix, head-to-head win rates, and per-model
paired comparisons against a baseline.

* A matrix cell is an entrant's normalized score in one env version: the mean over its keys there (as
  the overall score averages them), with the CI from averaging those keys' bootstrap replicates.
* A head-to-head cell is how often the row player finished ahead of the column player over the matches
  they both played (a draw counts one half), per pool (an env id, or ``"*"`` for every game).
* A comparison is :func:`paired_comparison` of a model against the baseline model on the samples
  (env version + seed) both were scored on, one per env.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from envsuite.leaderboard._records import Entrant, MatchResult, StoredEpisode
from envsuite.leaderboard._stats import (
    DEFAULT_BOOTSTRAP,
    Estimate,
    FloatArray,
    KeySummary,
    NoPairsError,
    PairedComparison,
    paired_comparison,
    percentile_estimate,
)

ALL_POOLS = "*"


@dataclass(frozen=True)
class MatrixCell:
    """One entrant's normalized score in one env version."""

    entrant: Entrant
    env: str
    score: Estimate
    n_keys: int


@dataclass(frozen=True)
class HeadToHead:
    """``row`` against ``col`` in one pool: matches both played and the row's share of the points."""

    pool: str
    row: str
    col: str
    matches: int
    wins: int
    draws: int
    losses: int

    @property
    def win_rate(self) -> float:
        """Wins plus half the draws, over the matches played."""
        return (self.wins + 0.5 * self.draws) / self.matches


@dataclass(frozen=True)
class EnvComparison:
    """A model against the baseline in one env version (``comparison`` None: no shared sample)."""

    model: str
    baseline: str
    env: str
    comparison: PairedComparison | None


def matrix_cells(entries: Iterable[KeySummary], confidence: float) -> list[MatrixCell]:
    """One cell per (entrant, env version) that has results."""
    grouped: dict[tuple[Entrant, str], list[KeySummary]] = defaultdict(list)
    for entry in entries:
        grouped[(entry.key.entrant, entry.key.versioned_env_id)].append(entry)
    cells = []
    for (entrant, env), keys in grouped.items():
        point = float(np.mean([k.normalized.mean for k in keys]))
        boot: FloatArray = np.mean([k.normalized_boot for k in keys], axis=0)
        n = sum(k.n_samples for k in keys)
        cells.append(MatrixCell(entrant, env, percentile_estimate(point, boot, confidence, n), len(keys)))
    return sorted(cells, key=lambda c: (c.env, c.entrant.model, c.entrant.sampling))


def head_to_head(matches: Iterable[MatchResult]) -> list[HeadToHead]:
    """Pairwise records per env pool and over all games, for every pair that met."""
    tally: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for match in matches:
        for i, a in enumerate(match.players):
            for j, b in enumerate(match.players):
                if i == j:
                    continue
                outcome = (
                    1 if match.ranks[i] < match.ranks[j] else 2 if match.ranks[i] == match.ranks[j] else 3
                )
                for pool in (match.env_id, ALL_POOLS):
                    counts = tally[(pool, a, b)]
                    counts[0] += 1
                    counts[outcome] += 1
    return sorted(
        (HeadToHead(pool, a, b, c[0], c[1], c[2], c[3]) for (pool, a, b), c in tally.items()),
        key=lambda h: (h.pool, h.row, h.col),
    )


def default_baseline(ranked_models: Sequence[str], model: str) -> str | None:
    """The best-ranked other model (the top model is compared with the runner-up)."""
    return next((m for m in ranked_models if m != model), None)


def env_comparisons(
    episodes: Sequence[StoredEpisode],
    models: Sequence[str],
    baselines: Mapping[str, str | None],
    *,
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float,
    seed: int,
) -> list[EnvComparison]:
    """Each model against its baseline, per env version both were scored on."""
    by_env_model: dict[tuple[str, str], list[StoredEpisode]] = defaultdict(list)
    for e in episodes:
        by_env_model[(e.key.versioned_env_id, e.key.model)].append(e)
    envs = sorted({env for env, _ in by_env_model})
    out: list[EnvComparison] = []
    for model in models:
        baseline = baselines.get(model)
        if baseline is None:
            continue
        for env in envs:
            mine, theirs = by_env_model.get((env, model)), by_env_model.get((env, baseline))
            if not mine or not theirs:
                continue
            try:
                comparison: PairedComparison | None = paired_comparison(
                    [*mine, *theirs], model, baseline, n_boot=n_boot, confidence=confidence, seed=seed
                )
            except NoPairsError:
                comparison = None
            out.append(EnvComparison(model, baseline, env, comparison))
    return out
