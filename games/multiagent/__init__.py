"""Generic multi-agent coordination for turn-based N-player games.

Write a game once against :class:`~envsuite.turn_games.TurnGame` (the protocol lives in the core, so the
PettingZoo adapters in ``envsuite.adapters.pettingzoo`` use it too); get single-seat envs against fixed
opponents, self-play groups and opponent pools for it here.
"""

from envsuite.games.multiagent._builders import (
    CatalogSelfPlayBuilder,
    OpponentPoolGroupBuilder,
    RoleSelfPlayBuilder,
    SeatOptions,
    SelfPlayGroupBuilder,
    VsOpponentGroupBuilder,
    opponent_setting,
    seat_options,
)
from envsuite.games.multiagent._coordinator import (
    DEFAULT_OPPONENT_TIMEOUT,
    DEFAULT_TURN_TIMEOUT,
    GameCoordinator,
    SeatResult,
    TurnStatus,
)
from envsuite.games.multiagent._match import MatchGame, MatchResult, play_match
from envsuite.games.multiagent._moves import bracket_action, last_bracketed, listed_moves
from envsuite.games.multiagent._opponents import (
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
from envsuite.games.multiagent._seat_env import DEFAULT_MAX_TURNS, SeatEnv, coordinator_against

__all__ = [
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
    # head-to-head matches between two policies
    "MatchGame",
    "MatchResult",
    "play_match",
    # group builders
    "CatalogSelfPlayBuilder",
    "RoleSelfPlayBuilder",
    "SeatOptions",
    "seat_options",
    "opponent_setting",
    "OpponentPoolGroupBuilder",
    "SelfPlayGroupBuilder",
    "VsOpponentGroupBuilder",
]
