"""The leaderboard as plain JSON values, for scripts (``envsuite leaderboard --json``) and the page.

Values are the stored data, not display text: a script gets the model name exactly as stored (JSON
escapes control characters, so printing the document never drives a terminal).
"""

from __future__ import annotations

import json
from typing import TypedDict

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._records import JsonScalar, Rating, ResultKey
from envsuite.leaderboard._stats import Estimate, KeySummary

JSON_FORMAT_VERSION = 1


class EstimateJson(TypedDict):
    """An :class:`~envsuite.leaderboard.Estimate`."""

    mean: float
    lo: float
    hi: float
    n: int


class KeyJson(TypedDict):
    """A result key, with its sampling settings and seeds as JSON rather than JSON text."""

    key_id: str
    env: str
    """The versioned env id."""
    env_id: str
    env_version: int
    model: str
    partner: str
    renderer: str
    sampling: dict[str, JsonScalar]
    seeds: list[int]
    package_version: str


class PassAtKJson(TypedDict):
    """pass@k and pass^k at one k, from ``n`` plays per episode (a :class:`~envsuite.leaderboard.PassAtK`)."""

    k: int
    n: int
    pass_at_k: EstimateJson | None
    pass_hat_k: EstimateJson | None


class EntryJson(KeyJson):
    """One leaderboard row: its key's fields and its scores."""

    n_samples: int
    n_episodes: int
    reward: EstimateJson | None
    success: EstimateJson | None
    normalized: EstimateJson | None
    reward_range: list[float]
    log_paths: list[str]
    dataset_revisions: list[str]
    """What the key's runs ran on (dataset revisions or content hashes); empty where not recorded."""
    metrics: dict[str, float]
    pass_at_k: list[PassAtKJson]
    """Empty unless the key played each episode K > 1 times (``sampling.samples``)."""
    pass_at_k_withheld: str | None


class RatingJson(TypedDict):
    """One player's rating in one pool."""

    pool: str
    player: str
    mu: float
    sigma: float
    ordinal: float
    matches: int


class OverallJson(TypedDict):
    """An entrant's rank and score over the shared envs."""

    rank: int
    model: str
    renderer: str
    sampling: dict[str, JsonScalar]
    package_version: str
    score: EstimateJson | None


class BoardJson(TypedDict):
    """The whole document (``format`` is :data:`JSON_FORMAT_VERSION`)."""

    format: int
    store: str | None
    confidence: float
    n_boot: int
    seed: int
    shared_envs: list[str]
    entries: list[EntryJson]
    overall: list[OverallJson]
    ratings: list[RatingJson]


def estimate_dict(est: Estimate | None) -> EstimateJson | None:
    if est is None:
        return None
    return {"mean": est.mean, "lo": est.lo, "hi": est.hi, "n": est.n}


def key_dict(key: ResultKey) -> KeyJson:
    return {
        "key_id": key.key_id,
        "env": key.versioned_env_id,
        "env_id": key.env_id,
        "env_version": key.env_version,
        "model": key.model,
        "partner": key.partner,
        "renderer": key.renderer,
        "sampling": json.loads(key.sampling),
        "seeds": key.seed_list(),
        "package_version": key.package_version,
    }


def entry_dict(entry: KeySummary) -> EntryJson:
    return {
        **key_dict(entry.key),
        "n_samples": entry.n_samples,
        "n_episodes": entry.n_episodes,
        "reward": estimate_dict(entry.reward),
        "success": estimate_dict(entry.success),
        "normalized": estimate_dict(entry.normalized),
        "reward_range": list(entry.reward_range),
        "log_paths": list(entry.log_paths),
        "dataset_revisions": list(entry.dataset_revisions),
        "metrics": dict(entry.metric_means),
        "pass_at_k": [
            {
                "k": v.k,
                "n": v.n,
                "pass_at_k": estimate_dict(v.pass_at_k),
                "pass_hat_k": estimate_dict(v.pass_hat_k),
            }
            for v in entry.pass_at.values
        ],
        "pass_at_k_withheld": entry.pass_at.withheld,
    }


def rating_dict(r: Rating) -> RatingJson:
    return {
        "pool": r.pool,
        "player": r.player,
        "mu": r.mu,
        "sigma": r.sigma,
        "ordinal": r.ordinal,
        "matches": r.matches,
    }


def board_dict(board: Leaderboard, *, store: str | None = None) -> BoardJson:
    """Everything the views show, as JSON values (``store`` names where the results were read)."""
    return {
        "format": JSON_FORMAT_VERSION,
        "store": store,
        "confidence": board.confidence,
        "n_boot": board.n_boot,
        "seed": board.seed,
        "shared_envs": list(board.shared_envs),
        "entries": [entry_dict(e) for e in board.entries],
        "overall": [
            {
                "rank": o.rank,
                "model": o.entrant.model,
                "renderer": o.entrant.renderer,
                "sampling": json.loads(o.entrant.sampling),
                "package_version": o.entrant.package_version,
                "score": estimate_dict(o.score),
            }
            for o in board.overall
        ],
        "ratings": [rating_dict(r) for r in board.ratings],
    }


def board_json(board: Leaderboard, *, store: str | None = None) -> str:
    """:func:`board_dict` as indented JSON text (ASCII only: safe to print anywhere)."""
    return json.dumps(board_dict(board, store=store), indent=2, ensure_ascii=True, allow_nan=False)
