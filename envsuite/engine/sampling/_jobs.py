"""A sampling request in flight in the engine (:class:`Job`) and each of its samples' rows (:class:`Row`):
what the engine thread keeps per request between decode steps; and the one piece of work its queue
carries that is not a request (:class:`ClearPrefixCache`, :class:`DropVariant`)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from envsuite.engine.sampling._grammar import CompiledGrammar, RowGrammar
from envsuite.engine.sampling._requests import (
    EngineRequest,
    EngineResult,
    FinishReason,
    GeneratedSequence,
    SampledToken,
)
from envsuite.engine.sampling._token_choice import RowSampling

R = TypeVar("R")


@dataclass
class Job(Generic[R]):
    """One request: its future (resolved with ``convert(result)``) and the samples finished so far."""

    request: EngineRequest
    future: concurrent.futures.Future[R]
    convert: Callable[[EngineResult], R]
    open_rows: int = 0
    sequences: dict[int, GeneratedSequence] = field(default_factory=dict)
    prompt_logprobs: list[float | None] | None = None
    cached_prompt_tokens: int = 0
    """How much of the prompt came from the prefix cache."""
    on_token: Callable[[SampledToken], None] | None = None
    """Called on the engine thread with every token as it is sampled (streaming); must be quick."""
    grammar: CompiledGrammar | None = None
    """The request's constraint, compiled when it was submitted."""
    variant: int = 0
    """Which of the engine's weights serve it (``SamplingEngine.add_variant``; 0: the engine's model)."""

    def finish(self) -> None:
        result = EngineResult(
            [self.sequences[i] for i in sorted(self.sequences)],
            self.prompt_logprobs,
            self.cached_prompt_tokens,
        )
        try:
            value = self.convert(result)
        except Exception as exc:
            self.fail(exc)
            return
        if self.future.set_running_or_notify_cancel():
            self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        if not self.future.done() and self.future.set_running_or_notify_cancel():
            self.future.set_exception(error)


@dataclass
class Row:
    """Sample ``index`` of ``job``: its sampling settings and the tokens it has sampled so far."""

    job: Job[Any]
    index: int
    sampling: RowSampling
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    grammar: RowGrammar | None = None
    """A constrained row's grammar state (None: a free row)."""
    constrained_logprobs: list[float] = field(default_factory=list)

    def take(
        self, token: int, logprob: float, constrained: float | None, top: list[tuple[int, float]]
    ) -> None:
        """Append a sampled token (to the grammar state too); ``constrained`` is its masked logprob."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        if self.sampling.top_logprobs:
            self.top.append(top)
        if self.grammar is not None:
            assert constrained is not None
            self.constrained_logprobs.append(constrained)
            self.grammar.advance(token)

    def sequence(self, finish: FinishReason) -> GeneratedSequence:
        """What the row sampled, as it ends for ``finish``."""
        top = self.top if self.sampling.top_logprobs else None
        if self.grammar is None:
            return GeneratedSequence(self.tokens, self.logprobs, finish, top)
        return GeneratedSequence(
            self.tokens, self.logprobs, finish, top, self.constrained_logprobs, self.grammar.outcome
        )


@dataclass(frozen=True)
class ClearPrefixCache:
    """Drop the engine's prefix cache between two steps, then set ``done`` (the caller waits on it)."""

    done: threading.Event


@dataclass(frozen=True)
class DropVariant:
    """Remove one of the engine's variants between two steps: its requests fail with ``error``."""

    variant: int
    error: BaseException
