"""Bench budgets: turn caps, reply lengths and episode limits per env, fitted to what a small model finishes.

``envsuite bench --budget small`` plays each multi-turn env under the ``small`` profile's limits: at most
``max_turns`` turns of the evaluated model (the episode then ends as ``max_turns``), at most
``max_tokens`` tokens a reply, at most ``episode_timeout_s`` seconds an episode (each the smaller of the
profile's and the bench's own setting). Single-turn envs (math, code, reasoning-gym) play as they do
without a budget. The default profile, ``full``, changes nothing, and ``envsuite.make(id)`` never sees a
budget: the bench hands the limits to its episode loop, not to the env.

A budget changes what an episode can earn, so the limits an env played under are part of its result key
(:meth:`EnvLimits.key_settings`, in the key's sampling settings): a shortened game never pools with the
full one on the leaderboard, nor with another profile's. An env the profile leaves as it is keeps the
key it has without a budget (its episodes are the same).

Where the numbers come from (issue 51 item 6): the whole-catalog bench with SmolLM2-135M at 4 episodes
per env (docs/benchmarks.md, ``docs/results/catalog-bench/catalog_bench.json``) spent 81% of its
episode-seconds in the 87 games (307 s an episode on Zen 5, 480 s on Zen 3, against 43 s and 121 s for
reasoning-gym); 12 games ended every episode at the 600 s limit and won nothing (mean reward 0 or -1).
A 600 s episode there has room for ~10 model turns of 256 tokens at a batch-64 row's ~4.4 tokens/s
(an estimate: those runs did not count turns). The ``small``
profile keeps a game to 8 turns of 96 tokens (a bracketed move fits in a few; SmolLM2's prose around it
is what ran to 256), and to 4 turns for the games no episode of which finished in 600 s; tool use and
twenty questions get a few turns more, as their answers come at the end. The profile bounds an episode's
work (turns times reply tokens), not its wall-clock time: with 100 episodes in flight on 2 cores under a
load average of 20, a first model turn waited 120-450 s in the sampler's queue, so a 150 s episode
limit cut all 56 multi-turn episodes of a sample before their first turn (2026-11-29); the bench's own
``episode_timeout_s`` (600 s) stays the safety net. ``FAMILY_EPISODE_COST`` is the same run's mean
seconds per episode by family (for ``small``: estimated from its caps until a whole-catalog run under it
measures them), which weighs the progress line's estimate of the time left (``evals.bench._progress``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envsuite.catalog.registration import EnvFamily, EnvKind, catalog_env_families, env_family, spec
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.leaderboard import JsonScalar

FULL = "full"
SMALL = "small"
BUDGETS = (FULL, SMALL)
_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Budget:
    """One profile's limits for an env (None: the bench's own setting)."""

    max_turns: int | None = None
    max_tokens: int | None = None
    episode_timeout_s: float | None = None


_SMALL_BY_FAMILY: dict[str, Budget] = {
    EnvFamily.GAMES.value: Budget(max_turns=8, max_tokens=96),
    EnvFamily.TWENTY_QUESTIONS.value: Budget(max_turns=10, max_tokens=64),
    EnvFamily.TOOL_USE.value: Budget(max_turns=6, max_tokens=128),
    # Families the measured run did not have yet, capped like tool use (their multi-turn envs only).
    "bfcl": Budget(max_turns=8, max_tokens=128),
    "workspace": Budget(max_turns=6, max_tokens=192),
    "judged": Budget(max_turns=8, max_tokens=128),
}
_NEVER_FINISHED = Budget(max_turns=4, max_tokens=96)
_SMALL_BY_ENV: dict[str, Budget] = {
    f"textarena/{game}-v0": _NEVER_FINISHED
    for game in (
        # Every episode of these ended at the 600 s limit (docs/results/catalog-bench).
        "Codenames",
        "DontSayIt",
        "IteratedPrisonersDilemma",
        "MarketEntryGame",
        "Poker",
        "PublicGoodsGame",
        "SantoriniBaseFixed",
        "SettlersOfCatan",
        "SimpleNegotiation",
        "SimpleTak",
        "Taboo",
        "ThreePlayerIPD",
    )
}
PROFILES: dict[str, tuple[dict[str, Budget], dict[str, Budget]]] = {
    FULL: ({}, {}),
    SMALL: (_SMALL_BY_FAMILY, _SMALL_BY_ENV),
}
"""Each profile's budgets by family and by env id (an env's own entry wins)."""

FAMILY_EPISODE_COST: dict[str, dict[str, float]] = {
    # Mean seconds per episode by family, the whole catalog at 4 episodes per env (Zen 5, full).
    FULL: {
        "games": 306.6,
        "tool use": 176.9,
        "twenty questions": 228.3,
        "reasoning": 42.8,
        "math": 13.3,
        "code": 23.8,
    },
    # The same under the small profile: games and the multi-turn families are capped (estimated from the
    # caps until measured: a capped game's turns at the full run's rate).
    SMALL: {
        "games": 75.0,
        "tool use": 70.0,
        "twenty questions": 60.0,
        "reasoning": 42.8,
        "math": 13.3,
        "code": 23.8,
    },
}
"""Relative cost of one episode by family: what the progress line's estimate of the time left weighs
the episodes still to play by (a family not listed costs the listed ones' mean)."""


class BenchSettings(Protocol):
    """What a budget reads of a bench's settings (``BenchConfig``'s fields of these names)."""

    @property
    def budget(self) -> str: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def episode_timeout_s(self) -> float | None: ...


def check_budget(name: str) -> None:
    if name not in PROFILES:
        raise UsageError(f"unknown bench budget {name!r}; choose one of {', '.join(BUDGETS)}")


@dataclass(frozen=True)
class EnvLimits:
    """What one env of a bench plays under: the bench's settings with its budget applied."""

    max_tokens: int
    episode_timeout_s: float | None
    max_turns: int | None = None
    """Turns of the evaluated model at most (None: the env's own limit)."""
    budget: str = ""
    """The profile that shortened this env; empty when none did (the bench's own settings)."""

    def key_settings(self) -> dict[str, JsonScalar]:
        """What the result key adds for a shortened env (nothing for one played as without a budget)."""
        if not self.budget:
            return {}
        return {
            "budget": self.budget,
            "max_turns": self.max_turns,
            "episode_timeout_s": self.episode_timeout_s,
        }

    def task_args(self) -> dict[str, Any]:
        """The task arguments a log records of the budget (``envsuite_env``'s ``budget`` and ``max_turns``:
        None for an env played as without one, as Inspect records the defaults)."""
        if not self.budget:
            return {"budget": None, "max_turns": None}
        return {"budget": self.budget, "max_turns": self.max_turns}


def env_limits(config: BenchSettings, env_id: str) -> EnvLimits:
    """The limits ``env_id`` plays under in a bench with ``config`` (its ``budget`` profile applied)."""
    own = EnvLimits(config.max_tokens, config.episode_timeout_s)
    budget = profile_budget(config.budget, env_id)
    if budget is None:
        return own
    env_spec = spec(env_id)
    turns = _smaller(budget.max_turns, env_spec.max_turns)
    tokens = _smaller(budget.max_tokens, config.max_tokens) or config.max_tokens
    timeout = _smaller(budget.episode_timeout_s, config.episode_timeout_s)
    limits = EnvLimits(tokens, timeout, turns, config.budget)
    if (tokens, timeout) == (own.max_tokens, own.episode_timeout_s) and turns == env_spec.max_turns:
        return own  # the budget shortens nothing here: the same episodes, the same key
    return limits


def profile_budget(profile: str, env_id: str) -> Budget | None:
    """The budget ``profile`` gives ``env_id`` (None: it plays as without one; single-turn envs always)."""
    check_budget(profile)
    env_spec = spec(env_id)
    if env_spec.kind is EnvKind.SINGLE_TURN and (env_spec.max_turns or 1) <= 1:
        return None
    by_family, by_env = PROFILES[profile]
    return by_env.get(env_spec.id) or by_family.get(env_family(env_spec))


def episode_cost(profile: str, family: str) -> float:
    """One episode's relative cost in ``family`` under ``profile`` (see :data:`FAMILY_EPISODE_COST`)."""
    costs = FAMILY_EPISODE_COST.get(profile, FAMILY_EPISODE_COST[FULL])
    return costs.get(family, sum(costs.values()) / len(costs))


def episode_costs(profile: str) -> Callable[[str], float]:
    """One episode's relative cost by env id under ``profile``, for the progress line's estimate."""

    @functools.cache
    def cost(env_id: str) -> float:
        return episode_cost(profile, catalog_env_families([env_id])[env_id])

    return cost


def _smaller(first: _N | None, second: _N | None) -> _N | None:
    values = [v for v in (first, second) if v is not None]
    return min(values) if values else None
