"""The turn-based game contract, the shared illegal-move convention, and a base for games written here.

A :class:`TurnGame` is pure game logic for N seats that move one at a time: it knows whose turn it
is, which moves are legal (when that is known), what each seat should be told, and how the game
ended. It knows nothing about tokens, renderers or envs; the coordinator and seat envs
(``envsuite.games.multiagent``) and the PettingZoo adapters (``envsuite.adapters.pettingzoo``) are
written once against it. TextArena games, chess and tic-tac-toe implement it; games written from
scratch (chess, tic-tac-toe, the scaffold's Nim) inherit the bookkeeping from :class:`TurnGameBase`.

A catalog env that plays such a game offers ``game_factory(env_kwargs)`` (:class:`GameEnvClass`), which
the multi-agent views reach through :func:`spec_game_factory`; its settings arrive as untyped keyword
arguments and are read with :func:`int_setting`, :func:`float_setting` and :func:`optional_setting`.

Illegal moves follow TextArena's convention everywhere: the first illegal move in a row is answered
with a re-prompt (:attr:`MoveStatus.RETRY`, the same seat moves again); the next one ends the game
(:attr:`MoveStatus.FORFEIT`) with the offender losing.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Protocol,
    SupportsFloat,
    SupportsIndex,
    SupportsInt,
    TypeVar,
    runtime_checkable,
)

from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.catalog.registration import EnvSpec

_T = TypeVar("_T")


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


@runtime_checkable
class SolvedGame(Protocol):
    """A game that can name the best moves (solved, like tic-tac-toe): optimal opponents use it."""

    def best_moves(self) -> list[str]:
        """Every move that keeps the best achievable value for the seat to move, as :meth:`apply` takes it."""
        ...


@runtime_checkable
class ReportsSeatMetrics(Protocol):
    """A game with per-seat numbers worth logging at its end (a role game's truthful share, deal price):
    each seat env adds them to its final step's metrics, next to its own reward."""

    def seat_metrics(self, seat: int) -> Mapping[str, float]:
        """Numbers for ``seat`` once the game is over (called once, after :meth:`TurnGame.outcome`)."""
        ...


class GameFactory(Protocol):
    """A small picklable config that builds a fresh game; equal seeds give equal games."""

    def make(self, seed: int) -> TurnGame: ...

    @property
    def name(self) -> str:
        """A short identifier for logs and metric tags."""
        ...


@runtime_checkable
class GameEnvClass(Protocol):
    """A catalog env class that plays a turn-based game, as the multi-agent views (PettingZoo, self-play,
    matches) need it: ``game_factory`` (a classmethod) builds its rules from the env's keyword arguments."""

    def game_factory(self, env_kwargs: Mapping[str, object]) -> GameFactory: ...


def spec_game_factory(env_spec: EnvSpec, env_kwargs: Mapping[str, object]) -> GameFactory:
    """The rules of catalog game ``env_spec`` with its resolved ``env_kwargs``; a UsageError (a
    ValueError) for an env that is not a turn-based game."""
    env_cls = env_spec.load()
    if not isinstance(env_cls, GameEnvClass):
        raise UsageError(
            f"{env_spec.id} is not a turn-based game with a multi-agent view (`envsuite list` shows the games)"
        )
    return env_cls.game_factory(env_kwargs)


def int_setting(env_kwargs: Mapping[str, object], name: str, default: int) -> int:
    """``int(env_kwargs[name])``, or ``default`` when absent (a game env's setting, read from its kwargs)."""
    value = env_kwargs.get(name, default)
    if not isinstance(value, SupportsInt | SupportsIndex | str):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return int(value)


def float_setting(env_kwargs: Mapping[str, object], name: str, default: float) -> float:
    """``float(env_kwargs[name])``, or ``default`` when absent."""
    value = env_kwargs.get(name, default)
    if not isinstance(value, SupportsFloat | SupportsIndex | str):
        raise TypeError(f"{name} must be a number, not {value!r}")
    return float(value)


def optional_setting(env_kwargs: Mapping[str, object], name: str, kind: type[_T]) -> _T | None:
    """``env_kwargs[name]`` when it is a ``kind``; None when absent or None."""
    value = env_kwargs.get(name)
    if value is None or isinstance(value, kind):
        return value
    raise TypeError(f"{name} must be a {kind.__name__} or None, not {value!r}")


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


class TurnGameBase(ABC):
    """The bookkeeping every hand-written :class:`TurnGame` needs, written once.

    It keeps, per seat, the messages not yet shown (:meth:`observation` hands them over once, plus the
    :meth:`prompt` of the seat to move), the retry-then-lose rule for illegal moves, and the outcome.
    A subclass supplies the rules: :meth:`current_player`, :meth:`legal_moves`, :meth:`move_vocabulary`,
    :meth:`extract_move`, :meth:`apply` and :meth:`prompt`; in :meth:`apply` it calls :meth:`accept`
    or :meth:`refuse`, :meth:`tell` for what other seats see, and :meth:`finish` when the game ends.

    Invariants: once :meth:`finish` ran, :meth:`is_over` is true, :meth:`outcome` is fixed and every
    seat's next observation ends with ``Game over: <reason>``.
    """

    num_players: int

    def __init__(self, intros: Sequence[str], retry_allowance: int = 1) -> None:
        """``intros``: the first message of each seat (its rules); one per seat."""
        if len(intros) != self.num_players:
            raise ValueError(f"{len(intros)} intros for {self.num_players} seats")
        self._rules = RetryThenLose(retry_allowance)
        self._outcome: GameOutcome | None = None
        self._pending: list[list[str]] = [[intro] for intro in intros]

    # -- the rules a subclass supplies ----------------------------------------------------------

    @abstractmethod
    def current_player(self) -> int: ...

    @abstractmethod
    def prompt(self, seat: int) -> str:
        """What the seat to move reads before moving (the board and its legal moves)."""

    @abstractmethod
    def seat_name(self, seat: int) -> str:
        """How messages name a seat (``Player 0``, ``White``)."""

    # -- shared bookkeeping ------------------------------------------------------------------

    def is_over(self) -> bool:
        return self._outcome is not None

    def outcome(self) -> GameOutcome | None:
        return self._outcome

    def close(self) -> None:
        return None

    def observation(self, seat: int) -> str:
        lines = self._pending[seat]
        if self._outcome is None and seat == self.current_player():
            lines = [*lines, self.prompt(seat)]
        self._pending[seat] = []
        return "\n\n".join(lines)

    def tell(self, seat: int, message: str) -> None:
        """Queue ``message`` for ``seat``'s next observation."""
        self._pending[seat].append(message)

    def accept(self) -> None:
        """Record that the seat to move made a legal move (resets its illegal-move count)."""
        self._rules.accepted()

    def refuse(self, seat: int, move: str, reason: str, retry_message: str) -> MoveResult:
        """An illegal move by ``seat``: a re-prompt (``retry_message``) the first time, then a forfeit."""
        status = self._rules.refused()
        if status is MoveStatus.FORFEIT:
            ending = f"{self.seat_name(seat)} made a second illegal move."
            self.finish(forfeit_rewards(self.num_players, seat), ending, (seat,))
        else:
            self.tell(seat, retry_message)
        return MoveResult(status, move, reason)

    def finish(self, rewards: tuple[float, ...], reason: str, invalid: tuple[int, ...] = ()) -> None:
        """End the game; every seat is told why."""
        self._outcome = GameOutcome(rewards=rewards, reason=reason, invalid_move_by=invalid)
        for pending in self._pending:
            pending.append(f"Game over: {reason}")

    def win_for(self, winner: int) -> tuple[float, ...]:
        """Rewards when ``winner`` wins: +1 for it, -1 for every other seat."""
        return tuple(1.0 if seat == winner else -1.0 for seat in range(self.num_players))
