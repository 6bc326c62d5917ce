"""The records the store takes in and gives back: result keys, runs, episodes and matches.

Producers (``evals/`` importing Inspect logs, a user's own loop) build these dataclasses and hand them
to :class:`leaderboard.ResultStore`; every string they carry is redacted of secrets on the way in.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeAlias

_VERSIONED_ID = re.compile(r"^(?P<base>.+?)-v(?P<version>\d+)$")

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
"""A value as JSON spells it: a scalar, or a list or string-keyed object of values."""


def canonical_json(value: object) -> str:
    """One spelling per value: sorted keys, no whitespace, ASCII only; NaN/inf are refused."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot store {value!r} as canonical JSON (plain JSON values only): {exc}") from exc


def canonical_seeds(seeds: Iterable[int]) -> str:
    """A seed set as canonical JSON: the sorted distinct integers (order and repeats do not matter)."""
    values = sorted({_as_int(s, "seed") for s in seeds})
    return canonical_json(values)


def _as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return value


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string (the store's only time format)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def split_env_id(env_id: str) -> tuple[str, int]:
    """``"arithmetic-v0"`` -> ``("arithmetic", 0)``; an id without ``-vN`` is version 0."""
    match = _VERSIONED_ID.match(env_id)
    if match is None:
        return env_id, 0
    return match.group("base"), int(match.group("version"))


def file_identity(path: str | Path) -> str:
    """A log identity from a file's bytes (``sha256:<hex>``), for logs that carry no run id."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class Entrant:
    """What competes across envs: a model under one renderer, sampling setting and package version."""

    model: str
    renderer: str
    sampling: str
    package_version: str

    @property
    def label(self) -> str:
        return self.model


SAMPLES_SETTING = "samples"
"""The sampling setting that says how many times each episode (problem) was played: results with
different values are different keys, and pass@k is reported only for keys with more than one."""


@dataclass(frozen=True)
class ResultKey:
    """Everything a score depends on. Results with different keys are never merged in the store.

    Build one with :meth:`create`, which canonicalises ``sampling`` and ``seeds``; the raw constructor
    expects them already canonical (as read back from the store).
    """

    model: str
    """Model name or checkpoint path/identity."""
    env_id: str
    """Catalog id without its ``-vN`` suffix (``"arithmetic"``)."""
    env_version: int
    partner: str
    """Partner/opponent/answerer identity (``""`` for single-agent envs)."""
    renderer: str
    sampling: str
    """Sampling settings (temperature, top_p, max_tokens, ...) as canonical JSON."""
    seeds: str
    """The seed set as canonical JSON (sorted distinct ints)."""
    package_version: str

    @classmethod
    def create(
        cls,
        *,
        model: str,
        env_id: str,
        renderer: str,
        sampling: Mapping[str, JsonScalar],
        seeds: Iterable[int],
        package_version: str,
        partner: str = "",
        env_version: int | None = None,
    ) -> ResultKey:
        """Build a key; ``env_id`` may carry its version (``"math-v0"``) instead of ``env_version``."""
        base, version = split_env_id(env_id)
        if env_version is not None:
            if base != env_id and env_version != version:
                raise ValueError(f"env id {env_id!r} disagrees with env_version={env_version}")
            version = _as_int(env_version, "env_version")
        for name, value in (("model", model), ("env_id", base), ("renderer", renderer)):
            if not value:
                raise ValueError(f"ResultKey.{name} must be a non-empty string")
        key = cls(
            model=model,
            env_id=base,
            env_version=version,
            partner=partner,
            renderer=renderer,
            sampling=canonical_json(dict(sampling)),
            seeds=canonical_seeds(seeds),
            package_version=package_version,
        )
        key.samples  # noqa: B018  (a bad plays-per-episode setting fails here, not when a board is built)
        return key

    @property
    def samples(self) -> int:
        """Plays per episode the key's sampling settings declare (:data:`SAMPLES_SETTING`; 1 if unset)."""
        value = json.loads(self.sampling).get(SAMPLES_SETTING, 1) if self.sampling.startswith("{") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"the {SAMPLES_SETTING!r} sampling setting must be an int >= 1, got {value!r}")
        return value

    @property
    def versioned_env_id(self) -> str:
        return f"{self.env_id}-v{self.env_version}"

    @property
    def entrant(self) -> Entrant:
        return Entrant(self.model, self.renderer, self.sampling, self.package_version)

    @property
    def key_id(self) -> str:
        """A stable short digest of every field (the store's primary key for keys)."""
        fields = [
            self.model,
            self.env_id,
            self.env_version,
            self.partner,
            self.renderer,
            self.sampling,
            self.seeds,
            self.package_version,
        ]
        return hashlib.sha256(canonical_json(fields).encode()).hexdigest()[:32]

    def seed_list(self) -> list[int]:
        return [int(s) for s in json.loads(self.seeds)]


@dataclass(frozen=True)
class SampleId:
    """One sample of the catalog: the same env version and seed means the same episode start."""

    env_id: str
    env_version: int
    seed: int

    def __str__(self) -> str:
        return f"{self.env_id}-v{self.env_version}#{self.seed}"


@dataclass(frozen=True)
class EpisodeResult:
    """One scored episode of a run."""

    seed: int
    reward: float
    success: bool | None = None
    """Whether the episode counts as solved/won (None when the env has no such notion)."""
    epoch: int = 1
    """Repeat number of the same sample within one run (Inspect epochs); 1-based."""
    metrics: Mapping[str, JsonScalar] = field(default_factory=dict)
    transcript_ref: str | None = None
    """Where the transcript lives (a log path plus sample reference), never the transcript itself."""

    def __post_init__(self) -> None:
        _as_int(self.seed, "seed")
        _as_int(self.epoch, "epoch")
        if not isinstance(self.reward, int | float) or not math.isfinite(self.reward):
            raise ValueError(f"reward must be a finite number, got {self.reward!r}")

    def sample_id(self, key: ResultKey) -> SampleId:
        return SampleId(key.env_id, key.env_version, self.seed)


@dataclass(frozen=True)
class RunRecord:
    """One evaluation run (one Inspect log, one ``bench`` invocation) of one key."""

    key: ResultKey
    run_id: str
    """Identity of the log: the Inspect eval id, or :func:`file_identity` of the log file.
    Importing the same run id again adds nothing."""
    log_path: str | None = None
    created_at: str = field(default_factory=utc_now)
    config: Mapping[str, object] = field(default_factory=dict)
    """Free-form run configuration; secrets are redacted and values that are not JSON stored as their
    ``repr`` (:func:`~envsuite.leaderboard.sanitize`)."""
    reward_range: tuple[float, float] | None = None
    """The env spec's reward bounds, used to normalise scores across envs."""
    dataset_revision: str | None = None
    """The dataset revision or content hash the run's episodes were drawn from (None: not known)."""

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("RunRecord.run_id must be a non-empty log identity")
        if self.reward_range is not None:
            lo, hi = self.reward_range
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"reward_range must be finite with lo < hi, got {self.reward_range!r}")


@dataclass(frozen=True)
class StoredRun:
    """A run as read back from the store."""

    key: ResultKey
    run_id: str
    log_path: str | None
    created_at: str
    config: Mapping[str, JsonValue]
    reward_range: tuple[float, float] | None
    n_episodes: int
    dataset_revision: str | None = None


@dataclass(frozen=True)
class StoredEpisode:
    """An episode as read back from the store, with the key and run it belongs to."""

    key: ResultKey
    run_id: str
    episode: EpisodeResult
    log_path: str | None

    @property
    def sample_id(self) -> SampleId:
        return self.episode.sample_id(self.key)


@dataclass(frozen=True)
class AddRunResult:
    """What :meth:`ResultStore.add_run` changed."""

    run_added: bool
    """False when the run id was already stored (a re-import)."""
    episodes_added: int


@dataclass(frozen=True)
class MatchResult:
    """One head-to-head game: players (models or fixed opponents) and their finishing ranks.

    ``ranks`` follow openskill: 0 is best, equal ranks are a draw. Build from scores (higher is
    better) with :meth:`from_scores`.
    """

    match_id: str
    env_id: str
    players: tuple[str, ...]
    ranks: tuple[int, ...]
    played_at: str = field(default_factory=utc_now)
    """Replay order for ratings (ties broken by ``match_id``)."""
    run_id: str | None = None

    def __post_init__(self) -> None:
        if not self.match_id:
            raise ValueError("MatchResult.match_id must be non-empty")
        if len(self.players) < 2 or len(self.players) != len(self.ranks):
            raise ValueError("a match needs >= 2 players and one rank per player")
        if len(set(self.players)) != len(self.players):
            raise ValueError(f"a player appears twice in match {self.match_id!r}: {self.players}")
        for rank in self.ranks:
            _as_int(rank, "rank")

    @classmethod
    def from_scores(
        cls,
        match_id: str,
        env_id: str,
        scores: Mapping[str, float],
        *,
        played_at: str | None = None,
        run_id: str | None = None,
    ) -> MatchResult:
        """Players ranked by score, highest first; equal scores share a rank (a draw)."""
        distinct = sorted(set(scores.values()), reverse=True)
        players = tuple(scores)
        ranks = tuple(distinct.index(scores[p]) for p in players)
        return cls(match_id, env_id, players, ranks, played_at or utc_now(), run_id)


@dataclass(frozen=True)
class Rating:
    """A player's openskill rating in one pool (an env id, or ``"*"`` for all games)."""

    pool: str
    player: str
    mu: float
    sigma: float
    ordinal: float
    """``mu - 3 * sigma``: the conservative skill estimate the table is ranked by."""
    matches: int
