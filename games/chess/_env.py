"""``chess-v0``: chess for one seat against a fixed opponent (a random legal mover by default)."""

from __future__ import annotations

from collections.abc import Mapping

from envsuite.core import EnvContext, MessageCompleter
from envsuite.games.chess._rules import ChessFactory
from envsuite.games.multiagent import DEFAULT_OPPONENT_TIMEOUT, SeatEnv, coordinator_against
from envsuite.turn_games import int_setting, optional_setting

DEFAULT_CHESS_MAX_TURNS = 150


class ChessEnv(SeatEnv):
    """The trained policy plays ``seat`` (0 = White); ``opponent`` plays the other side."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        opponent: str | MessageCompleter = "random",
        seat: int = 0,
        max_turns: int = DEFAULT_CHESS_MAX_TURNS,
        opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
        retry_allowance: int = 1,
        fen: str | None = None,
    ) -> None:
        game = self.game_factory({"retry_allowance": retry_allowance, "fen": fen}).make(ctx.seed)
        coordinator = coordinator_against(game, seat, opponent, ctx.seed, opponent_timeout=opponent_timeout)
        super().__init__(ctx, coordinator, seat, max_turns=max_turns)

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> ChessFactory:
        """The rules this env plays, for multi-agent views (PettingZoo, self-play)."""
        return ChessFactory(
            int_setting(env_kwargs, "retry_allowance", 1), optional_setting(env_kwargs, "fen", str)
        )
