"""Assemble a leaderboard from a store: per-key rows, the overall score across envs, and ratings.

Overall score (per entrant = model + renderer + sampling + package version):

    overall(m) = mean over E of  mean over keys k of m in env e of  (mean_reward(k) - lo_e) / (hi_e - lo_e)

where E is the set of env versions that *every* ranked entrant has results for, and [lo_e, hi_e] is
the env's reward range (from the run records, else the catalog spec, else the observed min/max).
Its CI averages the per-key bootstrap replicates the same way, so it is a percentile bootstrap
of the overall score with samples resampled independently within each env.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from envsuite.errors import UsageError
from envsuite.leaderboard._compare import (
    EnvComparison,
    HeadToHead,
    MatrixCell,
    default_baseline,
    env_comparisons,
    head_to_head,
    matrix_cells,
)
from envsuite.leaderboard._passk import pass_at_ks
from envsuite.leaderboard._ratings import compute_ratings
from envsuite.leaderboard._records import Entrant, Rating, StoredRun
from envsuite.leaderboard._stats import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    Estimate,
    FloatArray,
    KeySummary,
    group_by_key,
    observed_ranges,
    percentile_estimate,
    summarize_key,
)
from envsuite.leaderboard._store import ResultStore


@dataclass(frozen=True)
class OverallScore:
    """An entrant's normalised score averaged over the shared envs, with its rank (1 = best)."""

    rank: int
    entrant: Entrant
    score: Estimate
    envs: tuple[str, ...]


@dataclass(frozen=True)
class Leaderboard:
    """Everything the views render; built by :func:`build_leaderboard`."""

    entries: tuple[KeySummary, ...]
    """One row per result key, grouped by env, best mean reward first."""
    overall: tuple[OverallScore, ...]
    shared_envs: tuple[str, ...]
    """The env versions the overall score averages over (those every entrant has)."""
    ratings: tuple[Rating, ...]
    n_boot: int
    confidence: float
    seed: int
    cells: tuple[MatrixCell, ...] = ()
    """The model x env matrix: each entrant's normalized score per env version."""
    head_to_head: tuple[HeadToHead, ...] = ()
    """Pairwise game records, per env pool and over all games."""
    comparisons: tuple[EnvComparison, ...] = ()
    """Each model against its baseline (paired differences per env)."""
    baselines: Mapping[str, str | None] = field(default_factory=dict)
    """The baseline each model is compared with (None: no other model)."""

    @property
    def envs(self) -> tuple[str, ...]:
        return tuple(sorted({e.key.versioned_env_id for e in self.entries}))

    @property
    def models(self) -> tuple[str, ...]:
        """Model names, best overall rank first, then the unranked ones by name."""
        ranked = list(dict.fromkeys(o.entrant.model for o in self.overall))
        rest = sorted({e.key.model for e in self.entries} - set(ranked))
        return (*ranked, *rest)


def reward_ranges(
    runs: Sequence[StoredRun],
    observed: Mapping[str, tuple[float, float]],
    catalog: Mapping[str, tuple[float, float]],
) -> dict[str, tuple[float, float]]:
    """Per env version: the range stored with a run, else the catalog's, else the observed one."""
    ranges: dict[str, tuple[float, float]] = {}
    for run in runs:
        if run.reward_range is not None:
            ranges.setdefault(run.key.versioned_env_id, run.reward_range)
    for env in observed:
        if env not in ranges:
            ranges[env] = catalog.get(env) or observed[env]
    return ranges


def overall_scores(entries: Sequence[KeySummary], confidence: float) -> tuple[list[OverallScore], list[str]]:
    by_entrant: dict[Entrant, dict[str, list[KeySummary]]] = defaultdict(lambda: defaultdict(list))
    for entry in entries:
        by_entrant[entry.key.entrant][entry.key.versioned_env_id].append(entry)
    if not by_entrant:
        return [], []
    shared = sorted(set.intersection(*(set(envs) for envs in by_entrant.values())))
    if not shared:
        return [], []
    scored: list[tuple[Entrant, Estimate]] = []
    for entrant, per_env in by_entrant.items():
        points = [np.mean([k.normalized.mean for k in per_env[env]]) for env in shared]
        boots: list[FloatArray] = [
            np.mean([k.normalized_boot for k in per_env[env]], axis=0) for env in shared
        ]
        n = sum(k.n_samples for env in shared for k in per_env[env])
        boot: FloatArray = np.mean(boots, axis=0)
        scored.append((entrant, percentile_estimate(float(np.mean(points)), boot, confidence, n)))
    scored.sort(key=lambda item: (-item[1].mean, item[0].model, item[0].renderer, item[0].sampling))
    ranked = [OverallScore(i + 1, entrant, est, tuple(shared)) for i, (entrant, est) in enumerate(scored)]
    return ranked, shared


def build_leaderboard(
    store: ResultStore,
    *,
    env_ids: Iterable[str] | None = None,
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    catalog_ranges: Mapping[str, tuple[float, float]] | None = None,
    baseline: str | None = None,
) -> Leaderboard:
    """Summarise every key in the store (or only ``env_ids``), rank entrants, attach ratings.

    Scores are normalised by each env version's reward range: the one stored with its runs, else
    ``catalog_ranges`` (the caller's catalog, e.g. ``envsuite.catalog_reward_ranges(ids)``), else the
    range the stored rewards span. Every model is compared with ``baseline`` (default: the best-ranked
    other model) on the samples both were scored on.
    """
    if n_boot < 1:
        raise UsageError(f"n_boot must be >= 1, got {n_boot}")
    env_list = None if env_ids is None else list(env_ids)
    episodes = store.episodes(env_list)
    runs = store.runs(env_list)
    ranges = reward_ranges(runs, observed_ranges(episodes), catalog_ranges or {})
    revisions: dict[str, set[str]] = {}
    for run in runs:
        if run.dataset_revision is not None:
            revisions.setdefault(run.key.key_id, set()).add(run.dataset_revision)
    entries = [
        dataclasses.replace(
            summarize_key(
                key, eps, ranges[key.versioned_env_id], n_boot=n_boot, confidence=confidence, seed=seed
            ),
            pass_at=pass_at_ks(key, eps, n_boot=n_boot, confidence=confidence, seed=seed),
            dataset_revisions=tuple(sorted(revisions.get(key.key_id, ()))),
        )
        for key, eps in group_by_key(episodes).items()
    ]
    entries.sort(key=lambda s: (s.key.versioned_env_id, -s.reward.mean, s.key.model, s.key.key_id))
    overall, shared = overall_scores(entries, confidence)
    # With an env filter, rate only the matches of the chosen envs ("tictactoe" means every version,
    # as for results), so the all-games pool covers exactly those envs.
    ratings = store.ratings() if env_list is None else compute_ratings(store.matches(env_list))
    board = Leaderboard(
        entries=tuple(entries),
        overall=tuple(overall),
        shared_envs=tuple(shared),
        ratings=tuple(ratings),
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        cells=tuple(matrix_cells(entries, confidence)),
        head_to_head=tuple(head_to_head(store.matches(env_list))),
    )
    models = board.models
    if baseline is not None and baseline not in models:
        raise UsageError(f"baseline {baseline!r} has no results here; models: {', '.join(models)}")
    baselines = {m: baseline if baseline not in (None, m) else default_baseline(models, m) for m in models}
    comparisons = env_comparisons(
        episodes, models, baselines, n_boot=n_boot, confidence=confidence, seed=seed
    )
    return dataclasses.replace(board, comparisons=tuple(comparisons), baselines=baselines)
