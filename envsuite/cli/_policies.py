"""Policies the CLI can play with: random tokens, a person at the keyboard, or a model."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from envsuite import RendererConfig
from envsuite.core import Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.renderers import reply_to_tokens
from envsuite.renderers.base import Renderer


@dataclass
class HumanTokenCompleter(TokenCompleter):
    """Reads the reply from the terminal; the text becomes a cleanly stopped turn."""

    renderer: Renderer

    async def __call__(self, model_input: Observation, stop: StopCondition) -> TokensWithLogprobs:
        text = await asyncio.to_thread(input, "your reply> ")
        return TokensWithLogprobs(tokens=reply_to_tokens(self.renderer, text, stop), maybe_logprobs=None)


def build_policy(
    name: str, *, renderer: RendererConfig, max_tokens: int, temperature: float, seed: int
) -> TokenCompleter:
    """``random``, ``human``, or a model name / checkpoint directory sampled through the local backend."""
    if name == "human":
        return HumanTokenCompleter(renderer.build())
    from envsuite.completers import RandomTokenCompleter, SamplingTokenCompleter

    if name == "random":
        vocab_size = len(renderer.build().tokenizer)  # type: ignore[arg-type]
        return RandomTokenCompleter(vocab_size=vocab_size, max_tokens=min(max_tokens, 32), seed=seed)
    from envsuite.backends import local_sampling_client

    return SamplingTokenCompleter(local_sampling_client(name), max_tokens=max_tokens, temperature=temperature)
