"""Chess rules on python-chess behind the :class:`~envsuite.turn_games.TurnGame` protocol.

Seat 0 plays White. A move is SAN (``Nf3``, ``O-O``, ``exd8=Q+``) or UCI (``g1f3``, ``e7e8q``), bare or
in brackets; in a longer reply the last bracketed move counts. Games end by checkmate or by the draw
rules: stalemate, insufficient material, fivefold repetition and the 75-move rule (automatic), and,
with ``claim_draws`` (the default), threefold repetition and the 50-move rule, claimed on the
players' behalf as soon as they apply.
Illegal moves follow the shared retry-then-lose convention. Pure game logic: no env or token types.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import chess

from envsuite.games.multiagent import last_bracketed
from envsuite.turn_games import MoveResult, MoveStatus, TurnGameBase

_COLORS = ("White", "Black")
_RULES = (
    "You are playing chess as {color} (Player {seat}). On your turn reply with one move in brackets, "
    "in SAN or UCI notation, e.g. [e4], [Nf3] or [g1f3]. An illegal move gets one retry; a second one "
    "in a row loses the game."
)
_MAX_MOVE_CHARS = 12


@functools.cache
def uci_vocabulary() -> tuple[str, ...]:
    """Every UCI string a legal chess move can have (from-to pairs plus promotions), sorted."""
    moves = {
        chess.square_name(a) + chess.square_name(b) for a in chess.SQUARES for b in chess.SQUARES if a != b
    }
    for from_rank, to_rank in ((6, 7), (1, 0)):
        for file in range(8):
            for step in (-1, 0, 1):
                if 0 <= file + step < 8:
                    base = chess.square_name(chess.square(file, from_rank)) + chess.square_name(
                        chess.square(file + step, to_rank)
                    )
                    moves.update(base + piece for piece in "qrbn")
    return tuple(sorted(moves))


def parse_move(board: chess.Board, text: str) -> chess.Move | None:
    """The legal move ``text`` names in SAN or UCI, or None if it names none."""
    token = text.strip().strip("[]").strip()
    if not token or len(token) > _MAX_MOVE_CHARS:
        return None
    try:
        move = chess.Move.from_uci(token.lower())
    except ValueError:
        move = None
    if move is not None and move in board.legal_moves:
        return move
    try:
        return board.parse_san(token)
    except ValueError:
        return None


class ChessGame(TurnGameBase):
    """One game of chess between two seats (seat 0 is White)."""

    num_players = 2

    def __init__(self, retry_allowance: int = 1, fen: str | None = None, claim_draws: bool = True) -> None:
        super().__init__([_RULES.format(color=_COLORS[s], seat=s) for s in range(2)], retry_allowance)
        self.claim_draws = claim_draws
        self.board = chess.Board(fen) if fen else chess.Board()
        self._check_end()

    def current_player(self) -> int:
        return 0 if self.board.turn == chess.WHITE else 1

    def seat_name(self, seat: int) -> str:
        return _COLORS[seat]

    def legal_moves(self) -> list[str] | None:
        if self.is_over():
            return []
        return [m.uci() for m in self.board.legal_moves]

    def move_vocabulary(self) -> Sequence[str]:
        return uci_vocabulary()

    def prompt(self, seat: int) -> str:
        san = ", ".join(self.board.san(m) for m in self.board.legal_moves)
        return (
            f"Board ({_COLORS[seat]} to move; uppercase is White):\n{self.board}\n"
            f"FEN: {self.board.fen()}\nLegal moves: {san}"
        )

    def extract_move(self, reply: str) -> str:
        found = last_bracketed(reply)
        if found is not None:
            return found.strip("[]").strip()
        words = reply.strip().split()
        return words[-1] if words else ""

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self.current_player()
        parsed = parse_move(self.board, move)
        if parsed is None:
            reason = f"{move[:40]!r} is not a legal move in this position"
            return self.refuse(seat, move, reason, f"Illegal move: {reason}. Try again.")
        self.accept()
        san = self.board.san(parsed)
        self.board.push(parsed)
        self.tell(1 - seat, f"{_COLORS[seat]} played {san}.")
        self._check_end()
        return MoveResult(MoveStatus.ACCEPTED, parsed.uci())

    def _check_end(self) -> None:
        ending = self.board.outcome(claim_draw=self.claim_draws)
        if ending is None:
            return
        termination = ending.termination.name.lower().replace("_", " ")
        if ending.winner is None:
            self.finish((0.0, 0.0), f"Draw by {termination}.")
        else:
            winner = 0 if ending.winner == chess.WHITE else 1
            self.finish(self.win_for(winner), f"{_COLORS[winner]} wins by {termination}.")


@dataclass(frozen=True)
class ChessFactory:
    """Picklable config for :class:`ChessGame` (chess has no randomness; the seed is unused)."""

    retry_allowance: int = 1
    fen: str | None = None
    """Start position (None: the standard one)."""
    claim_draws: bool = True
    """End the game at threefold repetition and the 50-move rule (else only at fivefold / 75 moves)."""

    @property
    def name(self) -> str:
        return "chess"

    def make(self, seed: int) -> ChessGame:
        return ChessGame(self.retry_allowance, self.fen, self.claim_draws)
