"""EnvGroupBuilders for games: self-play, play against a fixed opponent, opponent pools, and the
catalog's self-play builder.

All three are small frozen dataclasses holding configs only (a game factory, an opponent config, a
renderer config), so they pickle; games, coordinators and opponents are built fresh in ``make_envs``.
Every member of a group plays the same seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict

from envsuite import DEFAULT_MAX_CONTEXT_TOKENS, CatalogGroupBuilder, RendererConfig, env_context
from envsuite.core import Env, EnvGroupBuilder, MessageCompleter, Split
from envsuite.games.multiagent._coordinator import (
    DEFAULT_OPPONENT_TIMEOUT,
    DEFAULT_TURN_TIMEOUT,
    GameCoordinator,
)
from envsuite.games.multiagent._opponents import OpponentConfig, OpponentPool, opponent_config
from envsuite.games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against
from envsuite.turn_games import GameFactory, float_setting, int_setting, optional_setting, spec_game_factory


@dataclass(frozen=True)
class SelfPlayGroupBuilder(EnvGroupBuilder):
    """Every seat is the trained policy: ``games_per_group`` games, one env per seat of each.

    Envs are ordered game by game, seat by seat (member ``i`` plays seat ``i % num_players``). A seat's
    ``step`` returns once the other seats have moved, so the rollout driver must step the group's
    envs concurrently (as ``asyncio.gather`` does); a seat left waiting longer than ``turn_timeout``
    ends the game with ``PARTNER_ERROR``.
    """

    game: GameFactory
    seed: int
    renderer: RendererConfig = field(default_factory=RendererConfig)
    games_per_group: int = 1
    split: Split = "train"
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS
    max_turns: int = DEFAULT_MAX_TURNS
    turn_timeout: float = DEFAULT_TURN_TIMEOUT

    async def make_envs(self) -> Sequence[Env]:
        if self.games_per_group < 1:
            raise ValueError("games_per_group must be >= 1")
        ctx = env_context(self.game.name, self.seed, self.split, self.renderer, self.max_context_tokens)
        envs: list[Env] = []
        for _ in range(self.games_per_group):
            game = self.game.make(self.seed)
            coordinator = GameCoordinator(game, turn_timeout=self.turn_timeout)
            envs.extend(
                SeatEnv(ctx, coordinator, seat, max_turns=self.max_turns) for seat in range(game.num_players)
            )
        return envs

    def logging_tags(self) -> list[str]:
        return [self.game.name, "selfplay"]


@dataclass(frozen=True)
class VsOpponentGroupBuilder(EnvGroupBuilder):
    """``group_size`` games where the policy plays ``seat`` and ``opponent`` plays every other seat."""

    game: GameFactory
    seed: int
    opponent: str | OpponentConfig = "random"
    renderer: RendererConfig = field(default_factory=RendererConfig)
    group_size: int = 1
    seat: int = 0
    split: Split = "train"
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS
    max_turns: int = DEFAULT_MAX_TURNS
    opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT

    async def make_envs(self) -> Sequence[Env]:
        return _envs_against(self, opponent_config(self.opponent))

    def logging_tags(self) -> list[str]:
        return [self.game.name, f"vs:{opponent_config(self.opponent).name}"]


@dataclass(frozen=True)
class OpponentPoolGroupBuilder(EnvGroupBuilder):
    """Like :class:`VsOpponentGroupBuilder`, with the opponent drawn from ``pool`` by the group's seed."""

    game: GameFactory
    seed: int
    pool: OpponentPool
    renderer: RendererConfig = field(default_factory=RendererConfig)
    group_size: int = 1
    seat: int = 0
    split: Split = "train"
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS
    max_turns: int = DEFAULT_MAX_TURNS
    opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT

    @property
    def opponent(self) -> OpponentConfig:
        """The pool member this group plays (fixed by the seed)."""
        return self.pool.choose(self.seed)

    async def make_envs(self) -> Sequence[Env]:
        return _envs_against(self, self.opponent)

    def logging_tags(self) -> list[str]:
        return [self.game.name, f"vs:{self.opponent.name}"]


def _envs_against(
    b: VsOpponentGroupBuilder | OpponentPoolGroupBuilder, opponent: OpponentConfig
) -> list[Env]:
    if b.group_size < 1:
        raise ValueError("group_size must be >= 1")
    ctx = env_context(b.game.name, b.seed, b.split, b.renderer, b.max_context_tokens)
    envs: list[Env] = []
    for _ in range(b.group_size):
        coordinator = coordinator_against(
            b.game.make(b.seed), b.seat, opponent, b.seed, opponent_timeout=b.opponent_timeout
        )
        envs.append(SeatEnv(ctx, coordinator, b.seat, max_turns=b.max_turns))
    return envs


@dataclass(frozen=True)
class CatalogSelfPlayBuilder(CatalogGroupBuilder):
    """A catalog game env in self-play: the group builder behind ids like ``tictactoe_selfplay-v0``.

    Built by the catalog like any group builder (it is the default one with other groups). On the train split,
    the group is every seat of ``group_size // num_players`` games of the same seed, so both sides learn
    from every game; when ``group_size`` is not a multiple of the seats, one more game fills the rest
    of the group with its first seats and gives its other seats to the env's ``opponent``. Other splits play the env as registered, one seat against its
    opponent, so held-out evaluations measure the policy against a fixed reference.

    The env class must offer ``game_factory(env_kwargs)``; ``max_turns``, ``system_prompt`` and
    ``legal_move_reward`` in ``env_kwargs`` apply to every seat, as they would to the single seat.
    """

    async def make_envs(self) -> Sequence[Env]:
        if self.split != "train":
            return [self.make_env() for _ in range(self.group_size)]
        factory = spec_game_factory(self.env_spec, self.env_kwargs)
        ctx = env_context(self.env_id, self.seed, self.split, self.renderer, self.max_context_tokens)
        options = seat_options(self.env_kwargs)
        opponent = opponent_setting(self.env_kwargs)
        envs: list[Env] = []
        while len(envs) < self.group_size:
            game = factory.make(self.seed)
            # Seats beyond the group's size (an odd group of a two-player game) go to the env's opponent.
            policy_seats = min(game.num_players, self.group_size - len(envs))
            opponents = {s: opponent.build(self.seed, s) for s in range(policy_seats, game.num_players)}
            coordinator = GameCoordinator(game, opponents, turn_timeout=DEFAULT_TURN_TIMEOUT)
            envs.extend(SeatEnv(ctx, coordinator, seat, **options) for seat in range(policy_seats))
        return envs

    def logging_tags(self) -> list[str]:
        return [self.env_spec.base_id, "selfplay"]


@dataclass(frozen=True)
class RoleSelfPlayBuilder(CatalogSelfPlayBuilder):
    """:class:`CatalogSelfPlayBuilder` for a role game (ids like ``referential_selfplay-v0``): train groups as
    there, and a held-out group is every seat of one game, each against the env's ``opponent`` (the scripted
    player by default), so an evaluation measures every role: with a policy per role, each policy on its own
    seats (``policy/<name>/test/...``). Member ``i`` plays seat ``i``; the env class takes ``seat``."""

    async def make_envs(self) -> Sequence[Env]:
        if self.split == "train":
            return await super().make_envs()
        seats = spec_game_factory(self.env_spec, self.env_kwargs).make(self.seed).num_players
        return [
            replace(self, env_kwargs={**self.env_kwargs, "seat": seat}).make_env() for seat in range(seats)
        ]


class SeatOptions(TypedDict):
    """The :class:`SeatEnv` keyword arguments every seat of a catalog game env shares."""

    max_turns: int
    system_prompt: str | None
    legal_move_reward: float


def seat_options(env_kwargs: Mapping[str, object]) -> SeatOptions:
    """The :class:`SeatEnv` settings a catalog game env passes on from its keyword arguments."""
    return {
        "max_turns": int_setting(env_kwargs, "max_turns", DEFAULT_MAX_TURNS),
        "system_prompt": optional_setting(env_kwargs, "system_prompt", str),
        "legal_move_reward": float_setting(env_kwargs, "legal_move_reward", 0.0),
    }


def opponent_setting(env_kwargs: Mapping[str, object]) -> OpponentConfig:
    """The opponent a catalog game env names in its keyword arguments (``random`` when it names none)."""
    opponent = env_kwargs.get("opponent", "random")
    if not isinstance(opponent, str | OpponentConfig | MessageCompleter):
        raise TypeError(f"opponent must be a name, an OpponentConfig or a MessageCompleter, not {opponent!r}")
    return opponent_config(opponent)
