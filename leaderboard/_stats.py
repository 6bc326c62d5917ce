"""Ranking statistics: per-key means with bootstrap CIs, an overall score, and paired comparisons.

Unit of resampling: the *sample* (env version + seed). Episodes of one key that share a sample
(Inspect epochs, repeated runs) are averaged first, so repeats tighten a sample's value instead of
counting as independent evidence. Each key gets its own generator seeded from ``(seed, key_id)``,
so a key's interval does not change when other keys are added to the table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from envsuite.leaderboard._records import ResultKey, SampleId, StoredEpisode

DEFAULT_BOOTSTRAP = 2000
"""Bootstrap replicates B: percentile endpoints move by well under 0.01 between reruns at this B."""
DEFAULT_CONFIDENCE = 0.95

FloatArray = npt.NDArray[np.float64]


class NoPairsError(ValueError):
    """Two selections share no sample, so they cannot be compared pairwise."""


@dataclass(frozen=True)
class Estimate:
    """A mean with a percentile-bootstrap confidence interval over ``n`` samples."""

    mean: float
    lo: float
    hi: float
    n: int


def key_rng(seed: int, key_id: str) -> np.random.Generator:
    return np.random.default_rng([seed, int(key_id[:12], 16)])


def bootstrap_means(values: FloatArray, n_boot: int, rng: np.random.Generator) -> FloatArray:
    """``n_boot`` means of resamples (with replacement, same size) of ``values``."""
    if values.size == 0:
        raise ValueError("cannot bootstrap an empty sample")
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    means: FloatArray = values[idx].mean(axis=1)
    return means


def percentile_estimate(point: float, boot: FloatArray, confidence: float, n: int) -> Estimate:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(boot, [tail, 100.0 - tail])
    return Estimate(float(point), float(lo), float(hi), n)


def per_sample_means(episodes: Iterable[StoredEpisode], *, metric: str = "reward") -> dict[SampleId, float]:
    """Mean ``reward`` (or ``success`` as 0/1, skipping episodes without it) per sample id."""
    sums: dict[SampleId, list[float]] = defaultdict(list)
    for stored in episodes:
        ep = stored.episode
        if metric == "reward":
            sums[stored.sample_id].append(ep.reward)
        elif metric == "success":
            if ep.success is not None:
                sums[stored.sample_id].append(1.0 if ep.success else 0.0)
        else:
            raise ValueError(f"unknown metric {metric!r}: use 'reward' or 'success'")
    return {sid: float(np.mean(vals)) for sid, vals in sums.items() if vals}


@dataclass(frozen=True)
class EpisodeRef:
    """Where one scored episode's transcript is: its log and the sample inside it."""

    seed: int
    epoch: int
    reward: float
    log_path: str | None
    sample_id: str | None
    """The sample's id inside the log (from ``transcript_ref = "<log_path>#<sample id>"``)."""


def episode_ref(stored: StoredEpisode) -> EpisodeRef:
    ref = stored.episode.transcript_ref
    sample = None
    if ref and stored.log_path and ref.startswith(stored.log_path + "#"):
        sample = ref[len(stored.log_path) + 1 :]
    return EpisodeRef(
        stored.episode.seed, stored.episode.epoch, stored.episode.reward, stored.log_path, sample
    )


@dataclass(frozen=True)
class PassAtK:
    """pass@k (and pass^k: all k plays succeed) of one key, averaged over its problems."""

    k: int
    n: int
    """Plays per problem behind the estimate (the same for every problem)."""
    pass_at_k: Estimate
    pass_hat_k: Estimate


@dataclass(frozen=True)
class PassAtKs:
    """A key's pass@k for each reported k, or why it has none."""

    values: tuple[PassAtK, ...] = ()
    withheld: str | None = None
    """Why a key of K > 1 plays has no pass@k (its problems have different numbers of plays)."""

    def at(self, k: int) -> PassAtK | None:
        """The estimate for ``k`` (None when not reported)."""
        return next((v for v in self.values if v.k == k), None)


@dataclass(frozen=True)
class KeySummary:
    """One leaderboard row: a result key with its scores."""

    key: ResultKey
    n_samples: int
    n_episodes: int
    reward: Estimate
    success: Estimate | None
    normalized: Estimate
    """Mean reward mapped to [0, 1] by the env's reward range: (r - lo) / (hi - lo)."""
    reward_range: tuple[float, float]
    log_paths: tuple[str, ...]
    metric_means: Mapping[str, float]
    """Mean of each numeric per-episode metric over the key's episodes."""
    normalized_boot: FloatArray = field(repr=False, compare=False)
    """The bootstrap replicates behind ``normalized`` (used by the overall score)."""
    episodes: tuple[EpisodeRef, ...] = field(default=(), repr=False, compare=False)
    """Every episode behind the row, in (seed, epoch) order, for links to transcripts."""
    pass_at: PassAtKs = PassAtKs()
    """pass@k over the key's problems when it played each episode K > 1 times (``leaderboard._passk``)."""
    dataset_revisions: tuple[str, ...] = ()
    """The dataset revisions (or content hashes) the key's runs recorded; empty where none was."""


def summarize_key(
    key: ResultKey,
    episodes: Sequence[StoredEpisode],
    reward_range: tuple[float, float],
    *,
    n_boot: int,
    confidence: float,
    seed: int,
) -> KeySummary:
    rng = key_rng(seed, key.key_id)
    rewards = np.array(list(per_sample_means(episodes).values()), dtype=np.float64)
    reward_boot = bootstrap_means(rewards, n_boot, rng)
    lo, hi = reward_range
    norm_boot: FloatArray = (reward_boot - lo) / (hi - lo)
    point = float(rewards.mean())
    successes = np.array(list(per_sample_means(episodes, metric="success").values()), dtype=np.float64)
    success = None
    if successes.size:
        success = percentile_estimate(
            float(successes.mean()), bootstrap_means(successes, n_boot, rng), confidence, successes.size
        )
    return KeySummary(
        key=key,
        n_samples=int(rewards.size),
        n_episodes=len(episodes),
        reward=percentile_estimate(point, reward_boot, confidence, rewards.size),
        success=success,
        normalized=percentile_estimate((point - lo) / (hi - lo), norm_boot, confidence, rewards.size),
        reward_range=reward_range,
        log_paths=tuple(sorted({e.log_path for e in episodes if e.log_path})),
        metric_means=numeric_metric_means(episodes),
        normalized_boot=norm_boot,
        episodes=tuple(sorted((episode_ref(e) for e in episodes), key=lambda r: (r.seed, r.epoch))),
    )


def numeric_metric_means(episodes: Iterable[StoredEpisode]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for stored in episodes:
        for name, value in stored.episode.metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[name].append(float(value))
    return {name: float(np.mean(vals)) for name, vals in sorted(values.items())}


@dataclass(frozen=True)
class PairedComparison:
    """``a`` minus ``b`` on the samples both were scored on."""

    a: str
    b: str
    metric: str
    n_pairs: int
    mean_a: float
    mean_b: float
    difference: Estimate
    """Mean of per-sample differences (a - b) with a paired-bootstrap CI (pairs resampled together)."""


def _select(episodes: Iterable[StoredEpisode], who: str | ResultKey) -> list[StoredEpisode]:
    if isinstance(who, ResultKey):
        return [e for e in episodes if e.key == who]
    return [e for e in episodes if e.key.model == who]


def paired_comparison(
    episodes: Sequence[StoredEpisode],
    a: str | ResultKey,
    b: str | ResultKey,
    *,
    metric: str = "reward",
    n_boot: int = DEFAULT_BOOTSTRAP,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> PairedComparison:
    """Compare two models (by name) or two keys on shared sample ids (env, version, seed)."""
    scores_a = per_sample_means(_select(episodes, a), metric=metric)
    scores_b = per_sample_means(_select(episodes, b), metric=metric)
    shared = sorted(set(scores_a) & set(scores_b), key=lambda s: (s.env_id, s.env_version, s.seed))
    label_a = a if isinstance(a, str) else a.model
    label_b = b if isinstance(b, str) else b.model
    if not shared:
        raise NoPairsError(
            f"{label_a!r} and {label_b!r} share no sample (env, version, seed); "
            f"they have {len(scores_a)} and {len(scores_b)} samples"
        )
    va = np.array([scores_a[s] for s in shared], dtype=np.float64)
    vb = np.array([scores_b[s] for s in shared], dtype=np.float64)
    diffs = va - vb
    boot = bootstrap_means(diffs, n_boot, np.random.default_rng(seed))
    return PairedComparison(
        a=label_a,
        b=label_b,
        metric=metric,
        n_pairs=len(shared),
        mean_a=float(va.mean()),
        mean_b=float(vb.mean()),
        difference=percentile_estimate(float(diffs.mean()), boot, confidence, len(shared)),
    )


def observed_ranges(episodes: Iterable[StoredEpisode]) -> dict[str, tuple[float, float]]:
    """Min/max reward per versioned env id (a fallback when no reward range is known)."""
    seen: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        seen[e.key.versioned_env_id].append(e.episode.reward)
    out: dict[str, tuple[float, float]] = {}
    for env, rewards in seen.items():
        lo, hi = min(rewards), max(rewards)
        out[env] = (lo, hi) if hi > lo else (lo, lo + 1.0)
    return out


def group_by_key(episodes: Iterable[StoredEpisode]) -> Mapping[ResultKey, list[StoredEpisode]]:
    grouped: dict[ResultKey, list[StoredEpisode]] = defaultdict(list)
    for e in episodes:
        grouped[e.key].append(e)
    return grouped
