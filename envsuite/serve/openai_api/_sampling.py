"""OpenAI sampling parameters to the local sampling client, and its sampled tokens back to text.

A request becomes one :class:`SampleSpec` per prompt (``n`` samples each, one shared prefill), sent to
the model's shared :class:`~envsuite.backends.local.LocalSamplingClient`, whose engine batches it with
every other request in flight on the same weights. Streaming hands each token from the engine thread
to the event loop as it is sampled (``on_token``).

Text follows OpenAI's conventions: a reply ends before its stop sequence (the end-of-turn token or the
first of the request's ``stop`` strings), which it does not contain; the token ids and logprobs kept for
capture are the sampled ones, stop token included. While streaming, text that could still turn out to
begin a stop string, or that ends inside a UTF-8 character, is held back until it is settled.

Under ``--sampling-engine vllm`` (a :class:`~envsuite.serve.openai_api._models.VllmTarget`) the same
spec goes to the vLLM server instead, as token ids (``VllmEngine.sample``): the sampled token ids and
their logprobs (and, asked for, each position's top alternatives) come back, so nothing is
re-tokenized. A stream then gets each reply's tokens together when the reply is complete (vLLM's own
streaming is not mapped). A server that is down is a :class:`~envsuite.serve._errors.SamplerDown` (503
with ``Retry-After``; in a stream, an error event).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import tinker

from envsuite.backends.local import SampledToken
from envsuite.serve._errors import SamplerDown
from envsuite.serve.openai_api._wire import OpenAIError, TokenLogprob, TopLogprob

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envsuite.backends.local import LocalSamplingClient
    from envsuite.chat import StopCondition
    from envsuite.constraints import Constraint
    from envsuite.serve.openai_api._models import VllmTarget


@dataclass(frozen=True)
class SampleSpec:
    """One prompt's sampling request, in the sampling client's terms."""

    prompt_T: list[int]
    n: int
    params: tinker.SamplingParams
    top_logprobs: int
    """Most likely tokens to report per sampled token (0: none)."""
    user_stops: tuple[str, ...]
    """The request's own stop strings (the text is cut before the first one sampled)."""
    first_index: int = 0
    """The choice index of this prompt's first sample (a batch of prompts numbers its choices on)."""
    constraint: Constraint | None = None
    """The language every sample is held to (``response_format``, forced or strict tool calls)."""


@dataclass(frozen=True)
class SampledChoice:
    """One sample as the engine returned it."""

    index: int
    tokens: list[int]
    logprobs: list[float]
    top: list[list[tuple[int, float]]] | None
    finish: str
    """``stop`` (a stop token or string ended it) or ``length``."""


@dataclass(frozen=True)
class TokenEvent:
    """A token sampled for choice ``index`` (streaming)."""

    index: int
    token: SampledToken


@dataclass(frozen=True)
class ChoicesEvent:
    """A prompt's samples, finished (streaming: after all their tokens)."""

    choices: list[SampledChoice]


def build_spec(
    *,
    prompt_T: list[int],
    n: int | None,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    seed: int | None,
    stop: str | list[str] | None,
    format_stop: StopCondition | None,
    eos_ids: frozenset[int],
    token_text: Callable[[int], str],
    top_logprobs: int,
) -> SampleSpec:
    """The spec for one prompt, with OpenAI's defaults (temperature 1, top_p 1).

    ``format_stop`` is the chat format's own stop (None: the model's end-of-sequence ids ``eos_ids``).
    With stop strings in the request the engine matches text only (it takes one kind at a time), so the
    format's stop token ids join them as their text (a special token decodes to its own marker).
    """
    user_stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if any(not s for s in user_stops):
        raise OpenAIError(400, "stop strings must be non-empty", param="stop")
    combined: StopCondition | None = format_stop
    if user_stops:
        own = format_stop if format_stop is not None else sorted(eos_ids)
        own_text = [token_text(s) if isinstance(s, int) else s for s in own]
        combined = list(dict.fromkeys([*user_stops, *own_text]))
    params = tinker.SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=-1 if top_k is None else top_k,
        seed=seed,
        stop=combined,
    )
    return SampleSpec(prompt_T, n or 1, params, top_logprobs, user_stops)


def cut_at_stops(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` before the earliest of ``stops``, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def _choices(spec: SampleSpec, response: tinker.SampleResponse) -> list[SampledChoice]:
    return [
        SampledChoice(
            spec.first_index + i,
            list(seq.tokens),
            list(seq.logprobs or []),
            None if seq.topk_logprobs is None else [list(t or []) for t in seq.topk_logprobs],
            seq.stop_reason,
        )
        for i, seq in enumerate(response.sequences)
    ]


def _start(
    client: LocalSamplingClient,
    spec: SampleSpec,
    on_token: Callable[[SampledToken], None] | None = None,
    vllm: VllmTarget | None = None,
) -> concurrent.futures.Future[tinker.SampleResponse]:
    if vllm is not None:
        assert spec.constraint is None  # the routes refused constraints on vLLM
        prompt = tinker.ModelInput.from_ints(spec.prompt_T)
        return vllm.engine.sample(
            vllm.model, client.get_base_model(), prompt, spec.n, spec.params, spec.top_logprobs
        )
    return client.sample(
        tinker.ModelInput.from_ints(spec.prompt_T),
        spec.n,
        spec.params,
        topk_sample_logprobs=spec.top_logprobs,
        on_token=on_token,
        constraint=spec.constraint,
    ).future()


def as_openai_error(exc: Exception) -> OpenAIError:
    """A sampling failure as the client's error: its request's fault (400) unless the server's (500)."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, SamplerDown):
        return OpenAIError(503, str(exc), code="sampler_unavailable")
    if isinstance(exc, (ValueError, TypeError)):
        return OpenAIError(400, f"{type(exc).__name__}: {exc}")
    return OpenAIError(500, f"sampling failed: {type(exc).__name__}: {exc}")


async def sample_all(
    client: LocalSamplingClient, specs: list[SampleSpec], vllm: VllmTarget | None = None
) -> list[SampledChoice]:
    """Every spec's samples (all submitted at once, so the engine batches them)."""
    futures = [asyncio.wrap_future(_start(client, spec, vllm=vllm)) for spec in specs]
    try:
        responses = await asyncio.gather(*futures)
    except SamplerDown:
        raise  # the app answers 503 with Retry-After
    except Exception as exc:
        raise as_openai_error(exc) from exc
    return [c for spec, r in zip(specs, responses, strict=True) for c in _choices(spec, r)]


async def stream_all(
    client: LocalSamplingClient, specs: list[SampleSpec], vllm: VllmTarget | None = None
) -> AsyncIterator[TokenEvent | ChoicesEvent]:
    """Tokens as they are sampled (on vLLM: a reply's tokens when it is complete), then each spec's
    finished choices. Leaving the iteration early (the client went away) cancels the requests, which
    frees their rows in the engine."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TokenEvent | ChoicesEvent | BaseException] = asyncio.Queue()

    def forward(spec: SampleSpec) -> Callable[[SampledToken], None]:
        def on_token(token: SampledToken) -> None:
            loop.call_soon_threadsafe(
                queue.put_nowait, TokenEvent(spec.first_index + token.sample_index, token)
            )

        return on_token

    def finished(spec: SampleSpec) -> Callable[[concurrent.futures.Future[tinker.SampleResponse]], None]:
        def done(future: concurrent.futures.Future[tinker.SampleResponse]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            if error is not None:
                loop.call_soon_threadsafe(queue.put_nowait, error)
                return
            choices = _choices(spec, future.result())
            if vllm is not None:  # no token callbacks from vLLM: each reply's tokens, now
                for choice in choices:
                    row = choice.index - spec.first_index
                    for position, (token, logprob) in enumerate(
                        zip(choice.tokens, choice.logprobs, strict=True)
                    ):
                        top = choice.top[position] if choice.top is not None else []
                        event = TokenEvent(choice.index, SampledToken(row, token, logprob, top))
                        loop.call_soon_threadsafe(queue.put_nowait, event)
            loop.call_soon_threadsafe(queue.put_nowait, ChoicesEvent(choices))

        return done

    futures = []
    try:
        for spec in specs:
            future = _start(client, spec, None if vllm is not None else forward(spec), vllm)
            future.add_done_callback(finished(spec))
            futures.append(future)
    except SamplerDown as exc:  # the stream's headers are sent: an error event, not a 503
        for future in futures:
            future.cancel()
        raise as_openai_error(exc) from exc
    try:
        remaining = len(specs)
        while remaining:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise as_openai_error(item if isinstance(item, Exception) else RuntimeError(str(item)))
            remaining -= isinstance(item, ChoicesEvent)
            yield item
    finally:
        for future in futures:
            future.cancel()


class TextStream:
    """One choice's text as its tokens arrive: each :meth:`push` returns the newly settled text."""

    def __init__(self, text_of: Callable[[list[int]], str], stops: tuple[str, ...]) -> None:
        self.text_of, self.stops = text_of, stops
        self.tokens: list[int] = []
        self.sent = ""
        self._hold = max((len(s) for s in stops), default=1) - 1

    def push(self, token: int) -> str:
        self.tokens.append(token)
        text, stopped = cut_at_stops(self.text_of(self.tokens), self.stops)
        if not stopped:
            text = text.rstrip("\ufffd")  # a character still being spelled out byte by byte
            text = text[: max(len(text) - self._hold, 0)]
        return self._advance(text)

    def finish(self, final: str) -> str:
        """The rest of the choice's final text (what earlier pushes did not send)."""
        return self._advance(final)

    def _advance(self, text: str) -> str:
        if not text.startswith(self.sent) or len(text) <= len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta


def token_logprobs(
    tokenizer: PreTrainedTokenizerBase,
    tokens: list[int],
    logprobs: list[float],
    top: list[list[tuple[int, float]]] | None,
) -> list[TokenLogprob]:
    """Chat ``logprobs.content`` entries, one per sampled token."""

    def piece(token: int) -> str:
        return str(tokenizer.decode([token], skip_special_tokens=False))

    entries = []
    for position, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
        best = top[position] if top is not None else []
        text = piece(token)
        entries.append(
            TokenLogprob(
                token=text,
                logprob=logprob,
                bytes=list(text.encode("utf-8", "surrogatepass")),
                top_logprobs=[
                    TopLogprob(
                        token=piece(t), logprob=v, bytes=list(piece(t).encode("utf-8", "surrogatepass"))
                    )
                    for t, v in best
                ],
            )
        )
    return entries
