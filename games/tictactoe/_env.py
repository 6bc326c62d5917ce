"""``tictactoe-v0``: tic-tac-toe for one seat against a fixed opponent (random, minimax, fixed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envsuite.core import EnvContext, MessageCompleter
from envsuite.games.multiagent._coordinator import DEFAULT_OPPONENT_TIMEOUT
from envsuite.games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against
from envsuite.games.tictactoe._rules import TicTacToeFactory


class TicTacToeEnv(SeatEnv):
    """The trained policy plays ``seat`` (0 = X, moves first); the other seat is ``opponent``."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        opponent: str | MessageCompleter = "random",
        seat: int = 0,
        max_turns: int = DEFAULT_MAX_TURNS,
        opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
        retry_allowance: int = 1,
    ) -> None:
        game = self.game_factory({"retry_allowance": retry_allowance}).make(ctx.seed)
        coordinator = coordinator_against(game, seat, opponent, ctx.seed, opponent_timeout=opponent_timeout)
        super().__init__(ctx, coordinator, seat, max_turns=max_turns)

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, Any]) -> TicTacToeFactory:
        """The rules this env plays, for multi-agent views (PettingZoo, self-play)."""
        return TicTacToeFactory(int(env_kwargs.get("retry_allowance", 1)))
