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


TOOL_REPLIES = (
    '<tool_call>[{"name": "calculator", "arguments": {"expression": "12 * 34"}}]</tool_call>',
    '<tool_call>[{"name": "search", "arguments": {"query": "population"}}]</tool_call>',
    '<tool_call>[{"name": "get", "arguments": {"key": "apples"}}, {"name": "set", "arguments": {"key": "pet", "value": "cat"}}]</tool_call>',
    '<tool_call>[{"name": "keys", "arguments": {}}]</tool_call>',
    '<tool_call>[{"name": "calculator", "arguments": {"expression": 7}}]</tool_call>',
    '<tool_call>[{"name": "search", "arguments": {"query": "mayor"</tool_call>',
    "408",
    "I do not know.",
)
"""Calls to the tool envs' tools (good, wrongly typed, unreadable) and plain answers, in SmolLM2's format."""


class ToolCallingKeyedCompleter(PromptKeyedCompleter):
    """Like :class:`PromptKeyedCompleter`, choosing among :data:`TOOL_REPLIES` (tool calls and answers)."""

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        self.calls += 1
        digest = hashlib.sha256(repr(model_input.to_ints()).encode()).digest()
        tokens = reply_to_tokens(self.renderer, TOOL_REPLIES[digest[0] % len(TOOL_REPLIES)], stop)
        return TokensWithLogprobs(tokens, [0.0] * len(tokens))
