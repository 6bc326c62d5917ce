"""Fixed opponents for the seats the trained policy does not play, and picklable configs that build them.

An opponent sees what a policy seat would see (the new observation text, the legal moves when the game
knows them) and answers with a reply; the game extracts the move from it as it does for the policy.
Every opponent owns a seeded RNG, so a seed fixes its play.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.core import Message, MessageCompleter
from envsuite.games.multiagent._moves import last_bracketed
from envsuite.turn_games import SolvedGame, TurnGame

FALLBACK_MOVE = "[0]"


@dataclass(frozen=True)
class SeatView:
    """What an opponent is shown when it is its turn."""

    seat: int
    observation: str
    """Text new for this seat since its previous turn (its first turn: the game's instructions)."""
    legal_moves: list[str] | None
    game: TurnGame
    """The game itself, for scripted players that read the position; opponents must not mutate it."""


class Opponent(ABC):
    """A player for one seat of one game."""

    @abstractmethod
    async def act(self, view: SeatView) -> str:
        """Reply for this turn (free text; the game extracts the move)."""

    def identity(self) -> str:
        return type(self).__name__


class FixedOpponent(Opponent):
    """A simple fixed policy for games whose legal moves are unknown: repeat the last example move seen.

    Game prompts usually show an example action (``e.g. '[4]'``); replaying the most recent bracketed
    text it has been shown is a legal move surprisingly often and is fully deterministic.
    """

    def __init__(self) -> None:
        self._last_seen: str | None = None

    async def act(self, view: SeatView) -> str:
        seen = last_bracketed(view.observation)
        if seen is not None:
            self._last_seen = seen
        return self._last_seen or FALLBACK_MOVE


class RandomOpponent(Opponent):
    """Picks uniformly among the legal moves; falls back to :class:`FixedOpponent` when they are unknown."""

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)
        self._fallback = FixedOpponent()

    async def act(self, view: SeatView) -> str:
        if view.legal_moves:
            return self._rng.choice(view.legal_moves)
        return await self._fallback.act(view)


class MinimaxOpponent(Opponent):
    """Optimal play where the game is solved (tic-tac-toe; random among equally good moves), else random."""

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)
        self._fallback = RandomOpponent(seed)

    async def act(self, view: SeatView) -> str:
        game = view.game
        if isinstance(game, SolvedGame) and not game.is_over():
            best = game.best_moves()
            if best:
                return self._rng.choice(best)
        return await self._fallback.act(view)


class CompleterOpponent(Opponent):
    """Any :class:`~envsuite.core.MessageCompleter` (a local model, a hosted one) as a player."""

    def __init__(self, completer: MessageCompleter, system_prompt: str | None = None) -> None:
        self._completer = completer
        self._messages: list[Message] = []
        if system_prompt:
            self._messages.append({"role": "system", "content": system_prompt})

    async def act(self, view: SeatView) -> str:
        self._messages.append({"role": "user", "content": view.observation})
        reply = await self._completer(list(self._messages))
        content = str(reply.get("content", ""))
        self._messages.append({"role": "assistant", "content": content})
        return content

    def identity(self) -> str:
        return f"completer:{self._completer.identity()}"


# -- configs ------------------------------------------------------------------------------------


class OpponentConfig(ABC):
    """A picklable description of an opponent; ``build`` makes a fresh one for one game and seat."""

    @abstractmethod
    def build(self, seed: int, seat: int) -> Opponent: ...

    @property
    @abstractmethod
    def name(self) -> str: ...


@dataclass(frozen=True)
class RandomOpponentConfig(OpponentConfig):
    def build(self, seed: int, seat: int) -> Opponent:
        return RandomOpponent(f"random/{seed}/{seat}")

    @property
    def name(self) -> str:
        return "random"


@dataclass(frozen=True)
class FixedOpponentConfig(OpponentConfig):
    def build(self, seed: int, seat: int) -> Opponent:
        return FixedOpponent()

    @property
    def name(self) -> str:
        return "fixed"


@dataclass(frozen=True)
class MinimaxOpponentConfig(OpponentConfig):
    def build(self, seed: int, seat: int) -> Opponent:
        return MinimaxOpponent(f"minimax/{seed}/{seat}")

    @property
    def name(self) -> str:
        return "minimax"


@dataclass(frozen=True)
class CompleterOpponentConfig(OpponentConfig):
    """Pickles when the completer does (e.g. a config-like completer that loads its model lazily)."""

    completer: MessageCompleter
    system_prompt: str | None = None

    def build(self, seed: int, seat: int) -> Opponent:
        return CompleterOpponent(self.completer, self.system_prompt)

    @property
    def name(self) -> str:
        return f"completer:{self.completer.identity()}"


OPPONENT_NAMES: dict[str, OpponentConfig] = {
    "random": RandomOpponentConfig(),
    "fixed": FixedOpponentConfig(),
    "minimax": MinimaxOpponentConfig(),
}


def opponent_config(opponent: str | OpponentConfig | MessageCompleter) -> OpponentConfig:
    """Resolve an opponent name (``random``, ``fixed``, ``minimax``), a MessageCompleter, or a config."""
    if isinstance(opponent, OpponentConfig):
        return opponent
    if isinstance(opponent, MessageCompleter):
        return CompleterOpponentConfig(opponent)
    try:
        return OPPONENT_NAMES[opponent]
    except KeyError:
        raise ValueError(
            f"unknown opponent {opponent!r}; known: {', '.join(sorted(OPPONENT_NAMES))}"
        ) from None


@dataclass(frozen=True)
class OpponentPool:
    """Opponents mixed by weight; each group draws one member from its own seed."""

    members: tuple[OpponentConfig, ...]
    weights: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("an opponent pool needs at least one member")
        if self.weights and (len(self.weights) != len(self.members) or min(self.weights) < 0):
            raise ValueError("weights must be non-negative, one per member")

    def choose(self, seed: int) -> OpponentConfig:
        rng = random.Random(f"pool/{seed}")
        weights: Sequence[float] | None = self.weights or None
        return rng.choices(self.members, weights=weights, k=1)[0]
