"""Policies the CLI can play with: random legal moves (or tokens), a person at the keyboard, or a model."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from envsuite import RendererConfig
from envsuite.core import Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.renderers import reply_to_tokens
from envsuite.renderers.base import Renderer

LegalMoves = Callable[[], list[str] | None]
"""The current seat's legal moves (None when the env does not know them)."""


@dataclass
class HumanTokenCompleter(TokenCompleter):
    """Reads the reply from the terminal; the text becomes a cleanly stopped turn."""

    renderer: Renderer

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        text = await asyncio.to_thread(input, "your reply> ")
        return TokensWithLogprobs(tokens=reply_to_tokens(self.renderer, text, stop), maybe_logprobs=None)


@dataclass
class RandomMoveCompleter(TokenCompleter):
    """Replies with a uniformly random legal move when the env knows them, else with random tokens.

    The move is written as the game states it (``[4]`` in tic-tac-toe, ``e2e4`` in chess) and sent as a
    cleanly stopped turn, so every move it makes is legal.
    """

    renderer: Renderer
    legal_moves: LegalMoves
    fallback: TokenCompleter
    seed: int = 0
    last_move: str | None = None
    """The move of the last reply (None when the reply was random tokens)."""
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        moves = self.legal_moves()
        if not moves:
            self.last_move = None
            return await self.fallback(model_input, stop, max_tokens=max_tokens)
        self.last_move = self._rng.choice(moves)
        return TokensWithLogprobs(
            tokens=reply_to_tokens(self.renderer, self.last_move, stop), maybe_logprobs=None
        )


def build_policy(
    name: str,
    *,
    renderer: RendererConfig,
    max_tokens: int,
    temperature: float,
    seed: int,
    legal_moves: LegalMoves | None = None,
    backend: str = "local",
    base_url: str | None = None,
) -> TokenCompleter:
    """``random`` (legal moves when ``legal_moves`` knows them, else random tokens), ``human``, or a model
    name / checkpoint sampled through ``backend`` (``tinker`` with ``base_url``: an ``envsuite serve``)."""
    if name == "human":
        return HumanTokenCompleter(renderer.build())
    from envsuite.completers import RandomTokenCompleter, SamplingTokenCompleter

    if name == "random":
        vocab_size = renderer.build().vocab_size
        tokens = RandomTokenCompleter(vocab_size=vocab_size, max_tokens=min(max_tokens, 32), seed=seed)
        if legal_moves is None:
            return tokens
        return RandomMoveCompleter(renderer.build(), legal_moves, tokens, seed)
    from envsuite.backends import sampling_client_for

    sampler = sampling_client_for(name, backend, base_url)
    return SamplingTokenCompleter(sampler, max_tokens=max_tokens, temperature=temperature)
