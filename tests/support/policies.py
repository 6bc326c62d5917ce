"""A scripted policy whose reply depends only on the prompt, so it answers the same wherever and in
whatever order the envs ask (the executors test compares trajectories across in-process and workers)."""

from __future__ import annotations

import hashlib

from envsuite import RendererConfig
from envsuite.core import Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.renderers import reply_to_tokens

REPLIES = ("42", "[4]", "Is it an animal?", "[0]", "The answer is \\boxed{7}", "[8]", "Is it a tool?", "13")


class PromptKeyedCompleter(TokenCompleter):
    """Picks one of :data:`REPLIES` by a hash of the prompt's tokens; logprobs 0 (scripted)."""

    def __init__(self, renderer: RendererConfig) -> None:
        self.renderer = renderer.build()
        self.calls = 0

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        self.calls += 1
        digest = hashlib.sha256(repr(model_input.to_ints()).encode()).digest()
        tokens = reply_to_tokens(self.renderer, REPLIES[digest[0] % len(REPLIES)], stop)
        return TokensWithLogprobs(tokens, [0.0] * len(tokens))
