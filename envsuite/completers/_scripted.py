"""Completers that need no model: scripted replies (tests, fixed baselines) and uniform random tokens."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import TypeVar

from envsuite.core import (
    Message,
    MessageCompleter,
    Observation,
    SampleStop,
    StopCondition,
    TokenCompleter,
    TokensWithLogprobs,
)

T = TypeVar("T")


class ScriptExhaustedError(RuntimeError):
    """A scripted completer was called more times than it has replies (and does not cycle)."""


class ScriptedTokenCompleter(TokenCompleter):
    """Replays the given replies in call order, ignoring the prompt.

    Replies given as plain token lists get logprob 0.0 per token: a scripted policy is deterministic,
    so every reply has probability 1. Their ``stop_reason`` is ``"stop"`` when the last token is one of
    the stop condition's token ids (or the condition is text), else ``"length"``. A per-call
    ``max_tokens`` cuts a reply (it then stopped for length). Every prompt seen is kept in
    :attr:`prompts` for inspection.
    """

    def __init__(self, replies: Sequence[Sequence[int] | TokensWithLogprobs], cycle: bool = False) -> None:
        if not replies:
            raise ValueError("ScriptedTokenCompleter needs at least one reply")
        self.replies: list[Sequence[int] | TokensWithLogprobs] = list(replies)
        self.cycle = cycle
        self.prompts: list[Observation] = []

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        reply = _next_reply(self.replies, len(self.prompts), self.cycle, type(self).__name__)
        self.prompts.append(model_input)
        if isinstance(reply, TokensWithLogprobs):
            out = TokensWithLogprobs(list(reply.tokens), _copy(reply.maybe_logprobs), reply.stop_reason)
        else:
            out = TokensWithLogprobs(list(reply), [0.0] * len(reply), _scripted_stop(reply, stop))
        if max_tokens is not None and len(out.tokens) > max_tokens:
            logprobs = None if out.maybe_logprobs is None else out.maybe_logprobs[:max_tokens]
            out = TokensWithLogprobs(out.tokens[:max_tokens], logprobs, "length")
        return out


class ScriptedMessageCompleter(MessageCompleter):
    """Replays the given replies (text or assistant messages) in call order, ignoring the conversation."""

    def __init__(self, replies: Sequence[str | Message], cycle: bool = False) -> None:
        if not replies:
            raise ValueError("ScriptedMessageCompleter needs at least one reply")
        self.replies: list[Message] = [
            Message(role="assistant", content=r) if isinstance(r, str) else r for r in replies
        ]
        self.cycle = cycle
        self.conversations: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> Message:
        reply = _next_reply(self.replies, len(self.conversations), self.cycle, type(self).__name__)
        self.conversations.append(list(messages))
        return Message(**reply)

    def identity(self) -> str:
        digest = hashlib.sha256(repr([(m["role"], m["content"]) for m in self.replies]).encode()).hexdigest()
        return (
            f"ScriptedMessageCompleter(replies={len(self.replies)}, cycle={self.cycle}, sha256={digest[:12]})"
        )


class RandomTokenCompleter(TokenCompleter):
    """Uniformly random token ids: a floor baseline and a garbage-input generator for env tests.

    Each reply has ``max_tokens`` tokens, unless a stop token id (when the stop condition is token ids)
    is drawn first; then the reply ends with it. Logprobs are the uniform draw's, ``-log(vocab_size)``
    per token. Seeded replies are reproducible in call order; nothing global is touched.
    """

    def __init__(self, vocab_size: int, max_tokens: int, seed: int | None = None) -> None:
        if vocab_size < 1 or max_tokens < 1:
            raise ValueError(f"vocab_size and max_tokens must be positive, got {vocab_size}, {max_tokens}")
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self._rng = random.Random(seed)

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        stop_ids = {s for s in stop if isinstance(s, int)}
        limit = self.max_tokens if max_tokens is None else max(1, min(self.max_tokens, max_tokens))
        tokens: list[int] = []
        while len(tokens) < limit:
            tokens.append(self._rng.randrange(self.vocab_size))
            if tokens[-1] in stop_ids:
                return TokensWithLogprobs(tokens, [-math.log(self.vocab_size)] * len(tokens), "stop")
        return TokensWithLogprobs(tokens, [-math.log(self.vocab_size)] * len(tokens), "length")


def _next_reply(replies: list[T], calls: int, cycle: bool, owner: str) -> T:
    if calls >= len(replies) and not cycle:
        raise ScriptExhaustedError(f"{owner} has {len(replies)} replies and was called {calls + 1} times")
    return replies[calls % len(replies)]


def _scripted_stop(tokens: Sequence[int], stop: StopCondition) -> SampleStop:
    stop_ids = {s for s in stop if isinstance(s, int)}
    if not stop_ids:
        return "stop"
    return "stop" if tokens and tokens[-1] in stop_ids else "length"


def _copy(logprobs: list[float] | None) -> list[float] | None:
    return None if logprobs is None else list(logprobs)
