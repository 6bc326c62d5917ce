"""``tictactoe-v0``: tic-tac-toe for one seat against a fixed opponent (random, minimax, fixed).

``tictactoe_easy-v0`` is the same game with a way in for a small model: a system prompt that states
the move format, and ``legal_move_reward`` for every accepted move (see :data:`EASY_SYSTEM_PROMPT`).
"""

from __future__ import annotations

from collections.abc import Mapping

from envsuite.core import EnvContext, MessageCompleter
from envsuite.games.multiagent._coordinator import DEFAULT_OPPONENT_TIMEOUT
from envsuite.games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against
from envsuite.games.tictactoe._rules import TicTacToeFactory
from envsuite.turn_games import int_setting

EASY_SYSTEM_PROMPT = (
    "You are playing tic-tac-toe. Reply with the number of one free cell in square brackets, "
    "like [4], and nothing else."
)
"""The move format, said up front: the rules alone left SmolLM2-135M writing prose on every move."""

EASY_LEGAL_MOVE_REWARD = 0.1
"""Per accepted move in ``tictactoe_easy-v0``: a win (+1) still beats any number of legal moves."""


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
        system_prompt: str | None = None,
        legal_move_reward: float = 0.0,
    ) -> None:
        """``system_prompt``: a system message before the rules; ``legal_move_reward``: paid per accepted move."""
        game = self.game_factory({"retry_allowance": retry_allowance}).make(ctx.seed)
        coordinator = coordinator_against(game, seat, opponent, ctx.seed, opponent_timeout=opponent_timeout)
        super().__init__(
            ctx,
            coordinator,
            seat,
            max_turns=max_turns,
            system_prompt=system_prompt,
            legal_move_reward=legal_move_reward,
        )

    @classmethod
    def game_factory(cls, env_kwargs: Mapping[str, object]) -> TicTacToeFactory:
        """The rules this env plays, for multi-agent views (PettingZoo, self-play)."""
        return TicTacToeFactory(int_setting(env_kwargs, "retry_allowance", 1))
