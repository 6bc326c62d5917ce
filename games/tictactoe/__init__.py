"""Tic-tac-toe: the rules with an optimal (minimax) player, and ``tictactoe-v0`` against an opponent seat."""

from envsuite.games.tictactoe._env import EASY_LEGAL_MOVE_REWARD, EASY_SYSTEM_PROMPT, TicTacToeEnv
from envsuite.games.tictactoe._rules import TicTacToeFactory, TicTacToeGame, optimal_moves, render, winner

__all__ = [
    "EASY_LEGAL_MOVE_REWARD",
    "EASY_SYSTEM_PROMPT",
    "TicTacToeEnv",
    "TicTacToeFactory",
    "TicTacToeGame",
    "optimal_moves",
    "render",
    "winner",
]
