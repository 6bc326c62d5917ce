"""Tic-tac-toe rules (seat 0 plays X and moves first) and an optimal minimax player.

Moves are ``[0]``..``[8]``, cells numbered row by row. Illegal moves follow the shared retry-then-lose
convention. Pure game logic: no env, token or renderer types.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from envsuite.games.multiagent._moves import bracket_action
from envsuite.turn_games import MoveResult, MoveStatus, TurnGameBase

_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_MARKS = ("X", "O")
VOCABULARY: tuple[str, ...] = tuple(f"[{cell}]" for cell in range(9))

_RULES = (
    "You are playing tic-tac-toe as {mark} (Player {seat}). Cells are numbered 0-8 row by row. "
    "On your turn reply with the cell you take in brackets, e.g. [4] for the centre. "
    "An illegal move gets one retry; a second one in a row loses the game."
)


def winner(board: str) -> str | None:
    """``"X"``/``"O"`` if that mark has a line, else None. ``board`` is 9 chars of ``X``, ``O``, ``.``."""
    for a, b, c in _LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


@functools.cache
def _value(board: str, to_move: str) -> int:
    """Game value for X under optimal play (+1 X wins, 0 draw, -1 O wins)."""
    won = winner(board)
    if won is not None:
        return 1 if won == "X" else -1
    if "." not in board:
        return 0
    children = [_value(_place(board, i, to_move), _other(to_move)) for i, c in enumerate(board) if c == "."]
    return max(children) if to_move == "X" else min(children)


def _place(board: str, cell: int, mark: str) -> str:
    return board[:cell] + mark + board[cell + 1 :]


def _other(mark: str) -> str:
    return "O" if mark == "X" else "X"


def optimal_moves(board: str, to_move: str) -> list[int]:
    """Every cell that keeps the best achievable value for ``to_move`` (ties all returned)."""
    empty = [i for i, c in enumerate(board) if c == "."]
    values = {i: _value(_place(board, i, to_move), _other(to_move)) for i in empty}
    best = max(values.values()) if to_move == "X" else min(values.values())
    return [i for i in empty if values[i] == best]


def render(board: str) -> str:
    rows = [
        " | ".join(c if c != "." else str(r * 3 + k) for k, c in enumerate(board[r * 3 : r * 3 + 3]))
        for r in range(3)
    ]
    return "\n---------\n".join(rows)


class TicTacToeGame(TurnGameBase):
    """One game of tic-tac-toe (a :class:`~envsuite.turn_games.TurnGame`)."""

    num_players = 2

    def __init__(self, retry_allowance: int = 1) -> None:
        super().__init__([_RULES.format(mark=_MARKS[s], seat=s) for s in range(2)], retry_allowance)
        self.board = "." * 9
        self._to_move = 0

    def current_player(self) -> int:
        return self._to_move

    def seat_name(self, seat: int) -> str:
        return f"Player {seat}"

    def legal_moves(self) -> list[str] | None:
        if self.is_over():
            return []
        return [VOCABULARY[i] for i, c in enumerate(self.board) if c == "."]

    def move_vocabulary(self) -> Sequence[str]:
        return VOCABULARY

    def prompt(self, seat: int) -> str:
        legal = ", ".join(self.legal_moves() or [])
        return f"Board:\n{render(self.board)}\nYour move ({_MARKS[seat]}). Legal moves: {legal}"

    def best_moves(self) -> list[str]:
        """The optimal moves for the seat to move (a :class:`~envsuite.turn_games.SolvedGame`)."""
        if self.is_over():
            return []
        return [VOCABULARY[cell] for cell in optimal_moves(self.board, _MARKS[self._to_move])]

    def extract_move(self, reply: str) -> str:
        return bracket_action(reply)

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self._to_move
        cell = _cell(move)
        if cell is None or self.board[cell] != ".":
            reason = "not a cell 0-8" if cell is None else f"cell {cell} is taken"
            return self.refuse(seat, move, reason, f"Illegal move {move!r}: {reason}. Try again.")
        self.accept()
        self.board = _place(self.board, cell, _MARKS[seat])
        self.tell(1 - seat, f"Player {seat} ({_MARKS[seat]}) took cell {cell}.")
        won = winner(self.board)
        if won is not None:
            self.finish(self.win_for(seat), f"Player {seat} won.")
        elif "." not in self.board:
            self.finish((0.0, 0.0), "The game is a draw.")
        else:
            self._to_move = 1 - seat
        return MoveResult(MoveStatus.ACCEPTED, move)


def _cell(move: str) -> int | None:
    """The cell 0-8 a move names, or None (``"9"`` and other digit characters such as ``"²"`` name none)."""
    inner = move.strip().strip("[]").strip()
    if len(inner) == 1 and inner in "012345678":
        return int(inner)
    return None


@dataclass(frozen=True)
class TicTacToeFactory:
    """Picklable config for :class:`TicTacToeGame` (tic-tac-toe has no randomness; the seed is unused)."""

    retry_allowance: int = 1

    @property
    def name(self) -> str:
        return "tictactoe"

    def make(self, seed: int) -> TicTacToeGame:
        return TicTacToeGame(self.retry_allowance)
