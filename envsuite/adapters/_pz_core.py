"""Shared state of the PettingZoo wrappers: one turn-based game seen as token ids and discrete actions."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, TypedDict

import numpy as np

if TYPE_CHECKING:
    from envsuite.turn_games import GameFactory, TurnGame


class SeatInfo(TypedDict):
    """What an agent's ``info`` holds: the game's latest text for it and, on its turn, its legal moves."""

    text: str
    legal_moves: list[str] | None
    """Empty when it is not the agent's turn; None when the game does not list its moves."""


class TurnGameCore:
    """A :class:`~envsuite.turn_games.TurnGame` behind numeric observations and integer actions.

    Actions index the game's fixed move vocabulary when it has one (tic-tac-toe, chess), otherwise the
    current legal-move list (up to ``max_moves`` entries). An index that names no legal move is passed
    to the game as an illegal move, so the game's retry-then-lose rule applies.
    """

    def __init__(
        self, factory: GameFactory, *, model: str, obs_tokens: int, max_moves: int, max_steps: int
    ) -> None:
        from envsuite.models import get_tokenizer

        self.factory = factory
        self.tokenizer = get_tokenizer(model)
        self.vocab_size = len(self.tokenizer)
        self.pad_id = 0
        self.obs_tokens = obs_tokens
        self.max_steps = max_steps
        probe = factory.make(0)
        self.num_players = probe.num_players
        vocabulary = probe.move_vocabulary()
        probe.close()
        self.vocabulary: tuple[str, ...] | None = tuple(vocabulary) if vocabulary is not None else None
        self.vocab_index = {m: i for i, m in enumerate(self.vocabulary or ())}
        self.num_actions = len(self.vocabulary) if self.vocabulary is not None else max_moves
        self.agents = [f"player_{i}" for i in range(self.num_players)]
        self._seed_rng = random.Random(0)
        self.game: TurnGame = probe
        self.texts: list[str] = []
        self.tokens: list[np.ndarray] = []
        self.steps = 0

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self._seed_rng = random.Random(seed)
        self.game = self.factory.make(self._seed_rng.randrange(2**31))
        self.texts = [""] * self.num_players
        self.tokens = [self._encode("")] * self.num_players
        self.steps = 0
        self.refresh()

    def refresh(self) -> None:
        """Pull every seat's new text from the game and re-tokenize what changed."""
        for seat in range(self.num_players):
            new = self.game.observation(seat)
            if new:
                self.texts[seat] = new
                self.tokens[seat] = self._encode(new)

    def _encode(self, text: str) -> np.ndarray:
        ids = self.tokenizer.encode(text, add_special_tokens=False)[-self.obs_tokens :] if text else []
        out = np.full(self.obs_tokens, self.pad_id, dtype=np.int64)
        out[: len(ids)] = ids
        return out

    def current_seat(self) -> int:
        return self.game.current_player()

    def legal_indices(self) -> list[int]:
        legal = self.game.legal_moves() or []
        if self.vocabulary is None:
            return list(range(min(len(legal), self.num_actions)))
        return [self.vocab_index[m] for m in legal if m in self.vocab_index]

    def mask(self, seat: int) -> np.ndarray:
        out = np.zeros(self.num_actions, dtype=np.int8)
        if not self.game.is_over() and seat == self.current_seat():
            out[self.legal_indices()] = 1
        return out

    def observation(self, seat: int) -> dict[str, np.ndarray]:
        return {"observation": self.tokens[seat].copy(), "action_mask": self.mask(seat)}

    def info(self, seat: int) -> SeatInfo:
        return {
            "text": self.texts[seat],
            "legal_moves": self.game.legal_moves() if seat == self.current_seat() else [],
        }

    def move_for(self, action: int | None) -> str:
        if action is None or not 0 <= int(action) < self.num_actions:
            return ""
        if self.vocabulary is not None:
            return self.vocabulary[int(action)]
        legal = self.game.legal_moves() or []
        return legal[int(action)] if int(action) < len(legal) else ""

    def play(self, action: int | None) -> None:
        self.game.apply(self.move_for(action))
        self.steps += 1
        self.refresh()

    def rewards(self) -> list[float]:
        outcome = self.game.outcome()
        if outcome is None:
            return [0.0] * self.num_players
        return [float(r) for r in outcome.rewards]

    @property
    def truncated(self) -> bool:
        return not self.game.is_over() and self.steps >= self.max_steps
