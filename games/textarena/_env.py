"""``textarena/<Game>-v0``: one seat of a textarena game as an envsuite Env, other seats by an opponent."""

from __future__ import annotations

from collections.abc import Mapping

from envsuite.core import EnvContext, MessageCompleter
from envsuite.games.multiagent import (
    DEFAULT_MAX_TURNS,
    DEFAULT_OPPONENT_TIMEOUT,
    SeatEnv,
    coordinator_against,
)
from envsuite.games.textarena._game import TextArenaFactory
from envsuite.turn_games import optional_setting


class TextArenaEnv(SeatEnv):
    """The trained policy plays ``seat``; ``opponent`` (``random``, ``fixed``, ...) plays the others.

    ``random`` picks among the moves the game lists in its observation ("Available Moves: ...") and
    falls back to a fixed policy (replay the last example move shown) when a game lists none.
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        game: str,
        opponent: str | MessageCompleter = "random",
        seat: int = 0,
        num_players: int | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
    ) -> None:
        match = self.game_factory({"game": game, "num_players": num_players}).make(ctx.seed)
        coordinator = coordinator_against(match, seat, opponent, ctx.seed, opponent_timeout=opponent_timeout)
        super().__init__(ctx, coordinator, seat, max_turns=max_turns)

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> TextArenaFactory:
        """The rules this env plays, for multi-agent views (PettingZoo, self-play)."""
        return TextArenaFactory(str(env_kwargs["game"]), optional_setting(env_kwargs, "num_players", int))
