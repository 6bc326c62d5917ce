"""pass@k of a result key whose episodes were each played K times (``envsuite bench --samples K``).

A *problem* is a sample id (env version + episode seed); its plays are the key's episodes of that seed
(Inspect epochs), each a success or not (the env's own notion, ``EpisodeResult.success``). Per problem
the unbiased estimators of :mod:`envsuite.stats` (Chen et al.'s pass@k, and pass^k) use its ``n``
plays and ``c`` successes; across problems the mean has a percentile-bootstrap interval with the
problem as the unit. k runs over :func:`envsuite.stats.reported_ks` of the key's declared K.

Never pooled: K is part of the key's sampling settings, so benches of different K are different keys
(the store refuses epochs beyond a key's K), and within a key every problem must have the same ``n``;
a key whose problems differ (some plays missing) gets no pass@k, and says why, rather than an average
of estimates from different ``n``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from envsuite.leaderboard._records import ResultKey, SampleId, StoredEpisode
from envsuite.leaderboard._stats import Estimate, PassAtK, PassAtKs
from envsuite.stats import Interval, ProblemSamples, reported_ks, sampled_metrics


class MixedPlaysError(ValueError):
    """The problems of one key were played a different number of times: their pass@k are not pooled."""


def plays_per_problem(episodes: Iterable[StoredEpisode]) -> dict[SampleId, tuple[bool, ...]]:
    """Each problem's plays as successes, in epoch order (episodes without a success notion left out)."""
    plays: dict[SampleId, list[tuple[int, bool]]] = defaultdict(list)
    for stored in episodes:
        if stored.episode.success is not None:
            plays[stored.sample_id].append((stored.episode.epoch, stored.episode.success))
    return {sid: tuple(ok for _, ok in sorted(found)) for sid, found in plays.items()}


def pass_at_ks(
    key: ResultKey,
    episodes: Iterable[StoredEpisode],
    *,
    n_boot: int,
    confidence: float,
    seed: int,
) -> PassAtKs:
    """pass@k of ``key`` for every reported k (none when the key declares one play per episode)."""
    if key.samples == 1:
        return PassAtKs()
    plays = plays_per_problem(episodes)
    if not plays:
        return PassAtKs(withheld="no episode has a success value")
    try:
        problems = pooled_problems(plays)
    except MixedPlaysError as exc:
        return PassAtKs(withheld=str(exc))
    n = problems[0].n
    # The key's own bootstrap stream (as for its other intervals): adding keys changes nothing here,
    # and every k resamples the same problems, so the intervals of one key line up.
    stream = abs(seed) * 2**48 + int(key.key_id[:12], 16)
    values = []
    for k in (k for k in reported_ks(key.samples) if k <= n):
        metrics = sampled_metrics(problems, k, n_boot=n_boot, confidence=confidence, seed=stream)
        values.append(PassAtK(k, n, _estimate(metrics.pass_at_k), _estimate(metrics.pass_hat_k)))
    return PassAtKs(tuple(values))


def pooled_problems(plays: dict[SampleId, tuple[bool, ...]]) -> list[ProblemSamples]:
    """The problems to average over, in a fixed order; :class:`MixedPlaysError` if their ``n`` differ."""
    counts = sorted({len(found) for found in plays.values()})
    if len(counts) > 1:
        raise MixedPlaysError(
            f"problems have different numbers of plays ({', '.join(map(str, counts))}): "
            "pass@k from different n is not pooled"
        )
    ordered = sorted(plays, key=lambda s: (s.env_id, s.env_version, s.seed))
    return [ProblemSamples(plays[sid]) for sid in ordered]


def _estimate(interval: Interval) -> Estimate:
    return Estimate(interval.mean, interval.lo, interval.hi, interval.n)
