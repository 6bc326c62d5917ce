"""One game shared by several seats: whose turn it is, opponents' moves, and endings nobody planned.

A :class:`GameCoordinator` owns one :class:`~envsuite.turn_games.TurnGame`. Seats are either *external*
(each driven by its own seat env, i.e. the trained policy) or played by an :class:`Opponent`. A seat
env submits its move and then awaits its next turn; meanwhile the coordinator plays the opponents'
moves and waits for the other external seats. Everything that can stall or fail ends the game with a
defined :class:`~envsuite.core.StopReason` instead: an opponent that raises or runs past
``opponent_timeout`` (``PARTNER_ERROR``), an external seat that does not move within ``turn_timeout``
(``PARTNER_ERROR``), a game that raises (``ENV_ERROR``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from envsuite.core import StopReason
from envsuite.games.multiagent._opponents import Opponent, SeatView
from envsuite.turn_games import MoveResult, MoveStatus, TurnGame

DEFAULT_OPPONENT_TIMEOUT = 60.0
DEFAULT_TURN_TIMEOUT = 600.0


@dataclass(frozen=True)
class TurnStatus:
    """What a seat finds when it is its turn again, or when the game ended first."""

    over: bool
    observation: str


@dataclass(frozen=True)
class SeatResult:
    """A seat's ending: its reward and why the game stopped for it."""

    reward: float
    stop_reason: StopReason
    detail: str


MAX_OPPONENT_MOVES_PER_TURN = 200
"""Opponent moves in a row before the game is ended as a partner error."""


class GameCoordinator:
    """Turn-taking for one game between external seats and opponents (single event loop)."""

    def __init__(
        self,
        game: TurnGame,
        opponents: Mapping[int, Opponent] | None = None,
        *,
        opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
        turn_timeout: float = DEFAULT_TURN_TIMEOUT,
    ) -> None:
        self.game = game
        self.opponents = dict(opponents or {})
        bad = [s for s in self.opponents if not 0 <= s < game.num_players]
        if bad:
            raise ValueError(f"opponent seats {bad} out of range for {game.num_players} players")
        self.opponent_timeout = opponent_timeout
        self.turn_timeout = turn_timeout
        self.aborted: StopReason | None = None
        self.abort_detail = ""
        self._changed = asyncio.Condition()
        self._drive_lock = asyncio.Lock()

    @property
    def over(self) -> bool:
        return self.aborted is not None or self.game.is_over()

    async def wait_for_turn(self, seat: int) -> TurnStatus:
        """Play opponents' moves, then wait until ``seat`` is to move or the game has ended."""
        await self._drive_opponents()
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.over or self.game.current_player() == seat),
                    self.turn_timeout,
                )
            except TimeoutError:
                self._abort_locked(
                    StopReason.PARTNER_ERROR, f"no move from another seat in {self.turn_timeout}s"
                )
        return TurnStatus(over=self.over, observation=self._observe(seat))

    async def submit(self, seat: int, reply: str) -> MoveResult | None:
        """Apply ``seat``'s reply as its move; None if it is not that seat's turn (or the game is over)."""
        if self.over or self.game.current_player() != seat:
            return None
        try:
            move = self.game.extract_move(reply)
            result = self.game.apply(move)
        except Exception as exc:
            await self.abort(StopReason.ENV_ERROR, f"the game raised {exc!r}")
            return MoveResult(MoveStatus.FORFEIT, reply[:200], f"the game raised {type(exc).__name__}")
        await self._notify()
        return result

    async def abort(self, reason: StopReason, detail: str) -> None:
        """End the game for every seat (first reason wins)."""
        async with self._changed:
            self._abort_locked(reason, detail)

    def result_for(self, seat: int) -> SeatResult:
        """The seat's reward and stop reason once :attr:`over`."""
        if self.aborted is not None:
            return SeatResult(0.0, self.aborted, self.abort_detail)
        outcome = self.game.outcome()
        if outcome is None:
            return SeatResult(0.0, StopReason.COMPLETED, "the game ended without rewards")
        reward = outcome.rewards[seat] if seat < len(outcome.rewards) else 0.0
        stop = StopReason.INVALID_MOVE if seat in outcome.invalid_move_by else StopReason.COMPLETED
        return SeatResult(float(reward), stop, outcome.reason)

    def close(self) -> None:
        self.game.close()

    # -- internals --------------------------------------------------------------------------

    def _observe(self, seat: int) -> str:
        try:
            return self.game.observation(seat)
        except Exception as exc:
            self._abort_unlocked(StopReason.ENV_ERROR, f"the game raised {exc!r}")
            return ""

    def _abort_locked(self, reason: StopReason, detail: str) -> None:
        self._abort_unlocked(reason, detail)
        self._changed.notify_all()

    def _abort_unlocked(self, reason: StopReason, detail: str) -> None:
        if self.aborted is None and not self.game.is_over():
            self.aborted = reason
            self.abort_detail = detail

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _drive_opponents(self) -> None:
        async with self._drive_lock:
            moved = 0
            while not self.over and self.game.current_player() in self.opponents:
                if moved >= MAX_OPPONENT_MOVES_PER_TURN:
                    # Some games let a seat act until it ends its own turn; a policy that never does
                    # would otherwise hold the game forever.
                    await self.abort(
                        StopReason.PARTNER_ERROR, f"opponents made {moved} moves without passing the turn"
                    )
                    break
                await self._opponent_move(self.game.current_player())
                moved += 1
                await asyncio.sleep(0)  # let timeouts and other games run between opponent moves
            if moved or self.over:
                await self._notify()

    async def _opponent_move(self, seat: int) -> None:
        view = SeatView(seat, self._observe(seat), self.game.legal_moves(), self.game)
        try:
            reply = await asyncio.wait_for(self.opponents[seat].act(view), self.opponent_timeout)
        except TimeoutError:
            await self.abort(StopReason.PARTNER_ERROR, f"opponent at seat {seat} timed out")
            return
        except Exception as exc:
            await self.abort(StopReason.PARTNER_ERROR, f"opponent at seat {seat} raised {exc!r}")
            return
        try:
            self.game.apply(self.game.extract_move(str(reply)))
        except Exception as exc:
            await self.abort(StopReason.ENV_ERROR, f"the game raised {exc!r}")
