"""Head-to-head matches: two token policies play each other on a two-player catalog game.

Both seats are external (:class:`SeatEnv` with no opponent), so each policy sees exactly what it sees
in training. Policy A plays seat ``i % 2`` in game ``i``, so neither side keeps the first-move
advantage; every game of a match runs concurrently, so batching samplers see all requests at once.
A game is scored from A's side by the game result alone (any ``legal_move_reward`` shaping is left
out): 1 for a win, 0.5 for a draw or a game cut off by a limit, 0 for a loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from envsuite import DEFAULT_MAX_CONTEXT_TOKENS, RendererConfig, env_context, episode_seed, spec
from envsuite.core import Split, TokenCompleter, Trajectory
from envsuite.errors import UsageError
from envsuite.games.multiagent._builders import seat_options
from envsuite.games.multiagent._coordinator import GameCoordinator
from envsuite.games.multiagent._seat_env import SeatEnv
from envsuite.rollouts import RolloutLimits, do_single_rollout, episode_metrics
from envsuite.turn_games import spec_game_factory


@dataclass(frozen=True)
class MatchGame:
    """One game of a match, from policy A's side."""

    index: int
    seed: int
    seat_a: int
    """The seat policy A played (B played the other)."""
    score_a: float
    """1 win, 0.5 draw (or a game cut off by a limit), 0 loss."""
    stop_a: str
    """A's stop reason (``completed``, ``invalid_move`` when A forfeited, ...)."""
    stop_b: str
    ending: str


@dataclass(frozen=True)
class MatchResult:
    """Every game of a match; A's mean score is its win rate with draws counted as half."""

    env_id: str
    games: list[MatchGame]

    @property
    def score_a(self) -> float:
        return sum(g.score_a for g in self.games) / len(self.games) if self.games else float("nan")

    def counts(self) -> dict[str, int]:
        """A's wins, draws and losses."""
        return {
            "wins": sum(g.score_a == 1.0 for g in self.games),
            "draws": sum(g.score_a == 0.5 for g in self.games),
            "losses": sum(g.score_a == 0.0 for g in self.games),
        }


async def play_match(
    env_id: str,
    policy_a: TokenCompleter,
    policy_b: TokenCompleter,
    *,
    n_games: int,
    seed: int = 0,
    split: Split = "test",
    renderer: RendererConfig | None = None,
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    limits: RolloutLimits | None = None,
    env_kwargs: Mapping[str, object] | None = None,
) -> MatchResult:
    """Play ``n_games`` of ``env_id`` (a two-player game env with ``game_factory``) between A and B."""
    if n_games < 1:
        raise UsageError(f"n_games must be >= 1, got {n_games}")
    env_spec = spec(env_id)
    kwargs = env_spec.resolve_kwargs(env_kwargs or {})
    factory = spec_game_factory(env_spec, kwargs)
    renderer = renderer or RendererConfig()
    limits = limits or RolloutLimits()

    async def one(index: int) -> MatchGame:
        game_seed = episode_seed(seed, "match", split, index)
        game = factory.make(game_seed)
        if game.num_players != 2:
            raise UsageError(f"{env_spec.id} has {game.num_players} seats; a match needs two")
        ctx = env_context(env_spec.id, game_seed, split, renderer, max_context_tokens)
        coordinator = GameCoordinator(game)
        envs = [SeatEnv(ctx, coordinator, seat, **seat_options(kwargs)) for seat in range(2)]
        seat_a = index % 2
        policies = {seat_a: policy_a, 1 - seat_a: policy_b}
        trajectories = await asyncio.gather(
            *(do_single_rollout(policies[seat], envs[seat], limits) for seat in range(2))
        )
        coordinator.close()
        mine, theirs = trajectories[seat_a], trajectories[1 - seat_a]
        return MatchGame(index, game_seed, seat_a, _score(mine), _stop(mine), _stop(theirs), _ending(mine))

    games = await asyncio.gather(*(one(i) for i in range(n_games)))
    return MatchResult(env_spec.id, list(games))


def _score(trajectory: Trajectory) -> float:
    metrics = episode_metrics(trajectory)
    if metrics.get("win", 0) > 0:
        return 1.0
    if metrics.get("loss", 0) > 0:
        return 0.0
    return 0.5


def _stop(trajectory: Trajectory) -> str:
    return str(trajectory.stop_reason or "none")


def _ending(trajectory: Trajectory) -> str:
    for transition in reversed(trajectory.transitions):
        if "ending" in transition.logs:
            return str(transition.logs["ending"])
    return ""
