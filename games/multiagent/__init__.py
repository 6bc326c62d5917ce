"""Generic multi-agent coordination for turn-based N-player games.

Write a game once against :class:`TurnGame`; get single-seat envs against fixed opponents, self-play
groups, opponent pools and (in ``envsuite.wrappers.pettingzoo``) PettingZoo envs for it.
"""

from games.multiagent._builders import (
    OpponentPoolGroupBuilder,
    SelfPlayGroupBuilder,
    VsOpponentGroupBuilder,
)
from games.multiagent._coordinator import (
    DEFAULT_OPPONENT_TIMEOUT,
    DEFAULT_TURN_TIMEOUT,
    GameCoordinator,
    SeatResult,
    TurnStatus,
)
from games.multiagent._moves import bracket_action, last_bracketed, listed_moves
from games.multiagent._opponents import (
    OPPONENT_NAMES,
    CompleterOpponent,
    CompleterOpponentConfig,
    FixedOpponent,
    FixedOpponentConfig,
    MinimaxOpponent,
    MinimaxOpponentConfig,
    Opponent,
    OpponentConfig,
    OpponentPool,
    RandomOpponent,
    RandomOpponentConfig,
    SeatView,
    opponent_config,
)
from games.multiagent._protocol import (
    GameFactory,
    GameOutcome,
    MoveResult,
    MoveStatus,
    RetryThenLose,
    TurnGame,
    forfeit_rewards,
)
from games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against
from games.multiagent._tictactoe import TicTacToeFactory, TicTacToeGame, optimal_moves
from games.multiagent._tictactoe_env import TicTacToeEnv

__all__ = [
    # the game protocol
    "GameFactory",
    "GameOutcome",
    "MoveResult",
    "MoveStatus",
    "RetryThenLose",
    "TurnGame",
    "forfeit_rewards",
    # reading moves from text
    "bracket_action",
    "last_bracketed",
    "listed_moves",
    # coordination and seat envs
    "DEFAULT_MAX_TURNS",
    "DEFAULT_OPPONENT_TIMEOUT",
    "DEFAULT_TURN_TIMEOUT",
    "GameCoordinator",
    "SeatEnv",
    "SeatResult",
    "TurnStatus",
    "coordinator_against",
    # opponents
    "OPPONENT_NAMES",
    "CompleterOpponent",
    "CompleterOpponentConfig",
    "FixedOpponent",
    "FixedOpponentConfig",
    "MinimaxOpponent",
    "MinimaxOpponentConfig",
    "Opponent",
    "OpponentConfig",
    "OpponentPool",
    "RandomOpponent",
    "RandomOpponentConfig",
    "SeatView",
    "opponent_config",
    # group builders
    "OpponentPoolGroupBuilder",
    "SelfPlayGroupBuilder",
    "VsOpponentGroupBuilder",
    # tic-tac-toe
    "TicTacToeEnv",
    "TicTacToeFactory",
    "TicTacToeGame",
    "optimal_moves",
]
