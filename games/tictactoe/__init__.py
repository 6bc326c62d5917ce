"""Tic-tac-toe: the rules with an optimal (minimax) player, and ``tictactoe-v0`` against an opponent seat."""

from envsuite.games.tictactoe._env import TicTacToeEnv
from envsuite.games.tictactoe._rules import TicTacToeFactory, TicTacToeGame, optimal_moves, render, winner

__all__ = [
    "TicTacToeEnv",
    "TicTacToeFactory",
    "TicTacToeGame",
    "optimal_moves",
    "render",
    "winner",
]
