"""The turn-based game contract the multi-agent layer drives, and the shared illegal-move convention.

A :class:`TurnGame` is pure game logic for N seats that move one at a time: it knows whose turn it
is, which moves are legal (when that is known), what each seat should be told, and how the game
ended. It knows nothing about tokens, renderers or envs; the coordinator, the seat envs and the
PettingZoo wrappers are written once against it. TextArena games, chess and tic-tac-toe implement it.

Illegal moves follow TextArena's convention everywhere: the first illegal move in a row is answered
with a re-prompt (:attr:`MoveStatus.RETRY`, the same seat moves again); the next one ends the game
(:attr:`MoveStatus.FORFEIT`) with the offender losing.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class MoveStatus(enum.StrEnum):
    """What happened to a submitted move."""

    ACCEPTED = "accepted"
    """The move was legal and applied."""
    RETRY = "retry"
    """The move was illegal; the same seat is re-prompted (its observation says why)."""
    FORFEIT = "forfeit"
    """The move was illegal again; the offender is out (two-player games: the game is over)."""


@dataclass(frozen=True)
class MoveResult:
    """The game's verdict on one submitted move."""

    status: MoveStatus
    move: str
    """The move as the game understood it (after extraction from the reply)."""
    reason: str = ""
    """Why a move was refused (empty when accepted)."""


@dataclass(frozen=True)
class GameOutcome:
    """How a finished game ended."""

    rewards: tuple[float, ...]
    """One reward per seat."""
    reason: str
    """A human-readable account of the ending."""
    invalid_move_by: tuple[int, ...] = ()
    """Seats that lost by illegal moves (empty for a regular ending)."""


@runtime_checkable
class TurnGame(Protocol):
    """One game in progress. Methods are synchronous and cheap; the game owns its RNG."""

    @property
    def num_players(self) -> int: ...

    def current_player(self) -> int:
        """The seat to move (meaningless once :meth:`is_over`)."""
        ...

    def is_over(self) -> bool: ...

    def legal_moves(self) -> list[str] | None:
        """The current seat's legal moves in the form :meth:`apply` accepts, or None if unknown."""
        ...

    def move_vocabulary(self) -> Sequence[str] | None:
        """Every move that can ever be legal (a fixed action space), or None if unbounded."""
        ...

    def observation(self, seat: int) -> str:
        """Text that is new for ``seat`` since the previous call for that seat (consumes it)."""
        ...

    def extract_move(self, reply: str) -> str:
        """The move a free-form reply means (e.g. its last ``[...]``); never raises."""
        ...

    def apply(self, move: str) -> MoveResult:
        """Play ``move`` for the current seat. Illegal input is a verdict, never an exception."""
        ...

    def outcome(self) -> GameOutcome | None:
        """The ending, once :meth:`is_over`; None before."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent."""
        ...


class GameFactory(Protocol):
    """A small picklable config that builds a fresh game; equal seeds give equal games."""

    def make(self, seed: int) -> TurnGame: ...

    @property
    def name(self) -> str:
        """A short identifier for logs and metric tags."""
        ...


class RetryThenLose:
    """Counts consecutive illegal moves of the seat to move: one retry, then a forfeit."""

    def __init__(self, allowance: int = 1) -> None:
        if allowance < 0:
            raise ValueError("allowance must be >= 0")
        self.allowance = allowance
        self._count = 0

    def accepted(self) -> None:
        self._count = 0

    def refused(self) -> MoveStatus:
        """Record an illegal move and say whether the offender may retry."""
        self._count += 1
        if self._count > self.allowance:
            return MoveStatus.FORFEIT
        return MoveStatus.RETRY


def forfeit_rewards(num_players: int, offender: int) -> tuple[float, ...]:
    """Offender -1; in a two-player game the other seat +1, otherwise the others 0."""
    winner_reward = 1.0 if num_players == 2 else 0.0
    return tuple(-1.0 if seat == offender else winner_reward for seat in range(num_players))
