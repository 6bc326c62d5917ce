"""A textarena game behind the :class:`~envsuite.turn_games.TurnGame` protocol, with isolated randomness.

The game is textarena's ``-raw`` variant (no wrappers); this adapter does the wrappers' two jobs
itself: it formats each seat's messages as ``[GAME] ...`` / ``[Player 1] ...`` lines and turns a reply
into textarena's action form (its last ``[...]``). Every call into textarena runs with the game's own
random state swapped in (see :mod:`envsuite.games.textarena._rng`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeAlias, TypeVar

from envsuite.games.multiagent import bracket_action, listed_moves
from envsuite.games.textarena._offline import ensure_offline_nltk
from envsuite.games.textarena._records import GameRecord
from envsuite.games.textarena._rng import IsolatedRandom
from envsuite.games.textarena._table import record
from envsuite.turn_games import GameOutcome, MoveResult, MoveStatus

T = TypeVar("T")
P = ParamSpec("P")

TextArenaMessage: TypeAlias = tuple[int, str, object]
"""One message in a textarena inbox: (sender id, with -1 for the game; text; textarena's message kind)."""


class _TextArenaState(Protocol):
    """The slice of textarena's ``State`` this adapter reads (textarena ships no type information)."""

    current_player_id: int
    done: bool
    observations: dict[int, list[TextArenaMessage]]
    """Each seat's unread messages."""
    game_info: dict[int, dict[str, object]]
    """Per seat: ``invalid_move`` (bool), ``reason`` (text) and game-specific entries."""
    rewards: dict[int, object] | None
    """Per seat, once the game is over; some games store a message in place of a reward."""
    role_mapping: dict[int, str]


class _TextArenaEnv(Protocol):
    """The slice of a textarena env this adapter calls."""

    @property
    def state(self) -> _TextArenaState: ...

    def reset(self, num_players: int, seed: int | None = None) -> object: ...

    def get_observation(self) -> tuple[int, list[TextArenaMessage]]: ...

    def step(self, action: str) -> object: ...

    def close(self) -> object: ...


_MAX_FREE_TEXT_CHARS = 4000
_GAME_ID = -1


class TextArenaGame:
    """One textarena game for ``num_players`` seats, seeded."""

    def __init__(self, game: GameRecord, seed: int, num_players: int | None = None) -> None:
        if game.unavailable:
            raise RuntimeError(f"textarena/{game.name} cannot run here: {game.unavailable}")
        if game.word_game:
            ensure_offline_nltk()
        import textarena as ta

        self.record = game
        self.num_players = num_players or game.num_players
        self._rng = IsolatedRandom(seed, numpy=game.numpy_rng)
        self._closed = False
        self._last_text: dict[int, str] = {}
        self._crash: tuple[int, str] | None = None
        """(seat, error) when textarena itself raised on a move: the game ends, that seat loses."""
        with self._rng.active(), contextlib.redirect_stdout(io.StringIO()):
            self._env: _TextArenaEnv = ta.make(_raw_id(game.name))
            self._env.reset(num_players=self.num_players, seed=seed)

    @property
    def state(self) -> _TextArenaState:
        return self._env.state

    def current_player(self) -> int:
        return int(self.state.current_player_id)

    def is_over(self) -> bool:
        return self._crash is not None or bool(self.state.done)

    def legal_moves(self) -> list[str] | None:
        seat = self.current_player()
        pending = self._format(self.state.observations.get(seat, []))
        return listed_moves(self._last_text.get(seat, "") + pending)

    def move_vocabulary(self) -> Sequence[str] | None:
        return None

    def observation(self, seat: int) -> str:
        if seat == self.current_player() and not self.is_over():
            _, messages = self._rng.call(_quiet, self._env.get_observation)
        else:
            # Reading another seat's inbox is plain data access: no textarena code runs, no RNG swap.
            messages = self.state.observations.get(seat, [])
            self.state.observations[seat] = []
        text = self._format(messages)
        if text:
            self._last_text[seat] = text
        return text

    def extract_move(self, reply: str) -> str:
        if self.record.bracket_actions:
            return bracket_action(reply)
        return reply.strip()[:_MAX_FREE_TEXT_CHARS]

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self.current_player()
        seen = len(self.state.observations.get(seat, []))
        try:
            self._rng.call(_quiet, self._env.step, move)
        except Exception as exc:
            # Some textarena games raise on malformed moves instead of flagging them; the move is then
            # an illegal move that ends the game (its state can no longer be trusted).
            self._crash = (seat, f"the game rejected the move ({type(exc).__name__}: {str(exc)[:200]})")
            return MoveResult(MoveStatus.FORFEIT, move, self._crash[1])
        if self._forfeited(seat):
            return MoveResult(MoveStatus.FORFEIT, move, "a second invalid move in a row")
        complaint = _invalid_notice(self.state.observations.get(seat, [])[seen:])
        if complaint is not None:
            return MoveResult(MoveStatus.RETRY, move, complaint)
        return MoveResult(MoveStatus.ACCEPTED, move)

    def _forfeited(self, seat: int) -> bool:
        info = self.state.game_info.get(seat, {})
        return bool(info.get("invalid_move", False))

    def outcome(self) -> GameOutcome | None:
        if not self.is_over():
            return None
        if self._crash is not None:
            offender, reason = self._crash
            others = 1.0 if self.num_players > 1 else 0.0
            crash_rewards = tuple(-1.0 if s == offender else others for s in range(self.num_players))
            return GameOutcome(rewards=crash_rewards, reason=reason, invalid_move_by=(offender,))
        rewards = self.state.rewards or {}
        info = self.state.game_info
        reasons = [str(info[s].get("reason", "")) for s in info if info[s].get("reason")]
        invalid = tuple(s for s in range(self.num_players) if info.get(s, {}).get("invalid_move", False))
        return GameOutcome(
            rewards=tuple(_reward_value(rewards.get(s, 0.0)) for s in range(self.num_players)),
            reason=reasons[0] if reasons else "game over",
            invalid_move_by=invalid,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._rng.call(_quiet, self._env.close)

    def _format(self, messages: Sequence[TextArenaMessage]) -> str:
        roles = self.state.role_mapping
        lines = []
        for sender, message, _ in messages:
            name = "GAME" if sender == _GAME_ID else roles.get(sender, f"Player {sender}")
            lines.append(f"[{name}] {message}")
        return "\n".join(lines)


def _reward_value(value: object) -> float:
    """A seat's reward as textarena stored it. Single-player games (Countdown, Cryptarithm) store the
    invalid-move message in place of the reward; that is a loss."""
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return -1.0


def _quiet(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call textarena code with its stray prints (puzzle generators, debug output) swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def _raw_id(name: str) -> str:
    from textarena.envs.registration import ENV_REGISTRY

    raw = f"{name}-v0-raw"
    return raw if raw in ENV_REGISTRY else f"{name}-v0"


def _invalid_notice(messages: Sequence[TextArenaMessage]) -> str | None:
    for sender, message, _ in messages:
        if sender == _GAME_ID and "invalid move" in message.lower():
            return message
    return None


@dataclass(frozen=True)
class TextArenaFactory:
    """Picklable config for a :class:`TextArenaGame`."""

    game: str
    num_players: int | None = None

    @property
    def name(self) -> str:
        return f"textarena/{self.game}"

    def make(self, seed: int) -> TextArenaGame:
        return TextArenaGame(record(self.game), seed, self.num_players)
