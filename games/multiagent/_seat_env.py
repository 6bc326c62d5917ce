"""An envsuite :class:`~envsuite.core.Env` for one seat of a coordinated game.

Each policy turn is one step: the reply is rendered back to text, handed to the coordinator as the
seat's move, and the step returns once it is the seat's turn again (the observation then holds
everything that happened meanwhile, including a re-prompt after an illegal move) or the game ended.
Rewards come at the end: the seat's game reward, with the stop reason the coordinator assigns. An env
may also pay ``legal_move_reward`` for every move the game accepts (0 by default): a reachable first
reward for a policy that cannot yet finish a game with legal moves (the final step's ``win``/``loss``/
``draw`` metrics still describe the game result alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from envsuite.constraints import Constraint
from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Message,
    MessageCompleter,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    StopReason,
    tokens_outside_vocabulary,
)
from envsuite.games.multiagent._coordinator import (
    DEFAULT_OPPONENT_TIMEOUT,
    DEFAULT_TURN_TIMEOUT,
    GameCoordinator,
)
from envsuite.games.multiagent._opponents import Opponent, OpponentConfig, opponent_config
from envsuite.turn_games import MoveStatus, ReportsSeatMetrics, TurnGame

DEFAULT_MAX_TURNS = 100
_EMPTY_OBSERVATION = "(It is your turn.)"
_MAX_LOG_CHARS = 2000


class SeatEnv(Env):
    """The policy's view of one seat. Single-use, like every Env."""

    def __init__(
        self,
        ctx: EnvContext,
        coordinator: GameCoordinator,
        seat: int,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        system_prompt: str | None = None,
        legal_move_reward: float = 0.0,
    ) -> None:
        if not 0 <= seat < coordinator.game.num_players:
            raise ValueError(f"seat {seat} out of range for {coordinator.game.num_players} players")
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        if not math.isfinite(legal_move_reward) or legal_move_reward < 0:
            raise ValueError(f"legal_move_reward must be finite and >= 0, got {legal_move_reward}")
        self.legal_move_reward = legal_move_reward
        self.ctx = ctx
        self.coordinator = coordinator
        self.seat = seat
        self.max_turns = max_turns
        self._messages: list[Message] = []
        if system_prompt:
            self._messages.append({"role": "system", "content": system_prompt})
        self._prompt: Observation | None = None
        self._turns = 0
        self._invalid_moves = 0
        self._legal_moves = 0

    @property
    def _stop(self) -> StopCondition:
        return self.ctx.renderer.get_stop_sequences()

    def conversation(self) -> list[Message]:
        return list(self._messages)

    def legal_moves(self) -> list[str] | None:
        """This seat's legal moves now, in the form a reply may state them, or None when the game does
        not know them (for scripted players such as ``envsuite play --policy random``)."""
        if self.coordinator.over:
            return []
        return self.coordinator.game.legal_moves()

    def action_constraint(self) -> Constraint | None:
        """Exactly one of this seat's legal moves, as the game states them (None where the game does not
        list its moves, or is over): what ``--constrain-actions`` samples under."""
        moves = self.legal_moves()
        return Constraint.choice(moves) if moves else None

    @property
    def opponent_identity(self) -> str:
        """Who plays the other seats (part of a result's identity on the leaderboard)."""
        names = sorted({opponent.identity() for opponent in self.coordinator.opponents.values()})
        return ",".join(names) if names else "self-play"

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        status = await self.coordinator.wait_for_turn(self.seat)
        self._messages.append({"role": "user", "content": status.observation or _EMPTY_OBSERVATION})
        prompt = self.ctx.renderer.build_generation_prompt(self._messages)
        if prompt.length > self.ctx.max_context_tokens:
            await self.coordinator.abort(StopReason.CONTEXT_OVERFLOW, f"seat {self.seat}'s first prompt")
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt = prompt
        return prompt, self._stop

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self._prompt is None:
            raise RuntimeError("step() called before initial_observation() (or after the episode ended)")
        outside = tokens_outside_vocabulary(action, self.ctx.renderer.vocab_size)
        if outside is not None:  # no sampler sends these: the game ends, the prompt is not extended
            self._turns += 1
            await self.coordinator.abort(StopReason.PARSE_ERROR, f"seat {self.seat}: {outside}")
            return self._final(self._prompt, {"truncated": 0.0}, {"error": outside}, 0.0)
        parsed = self.ctx.renderer.parse_response(list(action))
        reply = parsed.message.get("content", "")
        self._messages.append({"role": "assistant", "content": reply})
        self._turns += 1
        metrics: Metrics = {"truncated": float(not parsed.clean_stop)}
        logs: dict[str, str | int | float] = {"reply": reply[:_MAX_LOG_CHARS]}
        result = await self.coordinator.submit(self.seat, reply)
        shaping = 0.0
        if result is not None:
            logs["move"] = result.move[:_MAX_LOG_CHARS]
            if result.status is MoveStatus.ACCEPTED:
                self._legal_moves += 1
                shaping = self.legal_move_reward
            else:
                self._invalid_moves += 1
                logs["invalid_reason"] = result.reason[:_MAX_LOG_CHARS]
        if not self.coordinator.over and self._turns >= self.max_turns:
            await self.coordinator.abort(
                StopReason.MAX_TURNS, f"seat {self.seat} used {self.max_turns} turns"
            )
        status = await self.coordinator.wait_for_turn(self.seat)
        if status.observation or not status.over:
            self._messages.append({"role": "user", "content": status.observation or _EMPTY_OBSERVATION})
        next_prompt = self.ctx.renderer.build_next_prompt(self._prompt, list(action), self._messages)
        if status.over:
            return self._final(next_prompt, metrics, logs, shaping)
        if next_prompt.length > self.ctx.max_context_tokens:
            await self.coordinator.abort(
                StopReason.CONTEXT_OVERFLOW, f"seat {self.seat}'s prompt outgrew the budget"
            )
            return self._final(next_prompt, metrics, logs, shaping)
        self._prompt = next_prompt
        return StepResult(shaping, False, next_prompt, self._stop, metrics, logs)

    def _final(
        self,
        observation: Observation,
        metrics: Metrics,
        logs: dict[str, str | int | float],
        shaping: float,
    ) -> StepResult:
        self._prompt = None
        ending = self.coordinator.result_for(self.seat)
        metrics.update(
            {
                "turns": self._turns,
                "invalid_moves": self._invalid_moves,
                "legal_moves": self._legal_moves,
                "win": float(ending.reward > 0),
                # The full reward: a won game, or a solved single-player puzzle (where a positive
                # reward below 1 is partial credit, e.g. GuessTheNumber's closeness of the last guess).
                "solved": float(ending.reward >= 1.0),
                "loss": float(ending.reward < 0),
                # A game played to its end with no winner (not one cut off by a limit or an error).
                "draw": float(ending.reward == 0 and ending.stop_reason is StopReason.COMPLETED),
            }
        )
        if isinstance(self.coordinator.game, ReportsSeatMetrics) and self.coordinator.game.is_over():
            metrics.update(self.coordinator.game.seat_metrics(self.seat))
        logs["ending"] = ending.detail[:_MAX_LOG_CHARS]
        return StepResult.final(
            ending.reward + shaping, ending.stop_reason, observation, self._stop, metrics, logs
        )


def coordinator_against(
    game: TurnGame,
    seat: int,
    opponent: str | OpponentConfig | MessageCompleter,
    seed: int,
    *,
    opponent_timeout: float = DEFAULT_OPPONENT_TIMEOUT,
    turn_timeout: float = DEFAULT_TURN_TIMEOUT,
) -> GameCoordinator:
    """A coordinator where ``seat`` is external and every other seat is played by ``opponent``."""
    if not 0 <= seat < game.num_players:
        raise ValueError(f"seat {seat} out of range for {game.num_players} players")
    config = opponent_config(opponent)
    opponents: Mapping[int, Opponent] = {
        other: config.build(seed, other) for other in range(game.num_players) if other != seat
    }
    return GameCoordinator(game, opponents, opponent_timeout=opponent_timeout, turn_timeout=turn_timeout)
