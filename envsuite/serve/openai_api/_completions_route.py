"""``/completions``: prompts as text or token ids, sampled together (one spec per prompt), optionally
under vLLM's ``structured_outputs``; the reply as JSON or server-sent events."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from envsuite.capture import CapturedChoice
from envsuite.serve._http import state_of
from envsuite.serve.capture._requests import CaptureRequest, Turn
from envsuite.serve.openai_api._http import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    RECORDED_PARAMS,
    dump,
    parse_request,
    sse,
    usage_of,
)
from envsuite.serve.openai_api._models import ServedModel, refuse_beyond_context, serve_model
from envsuite.serve.openai_api._sampling import (
    ChoicesEvent,
    SampledChoice,
    SampleSpec,
    TextStream,
    build_spec,
    cut_at_stops,
    sample_all,
    stream_all,
    token_logprobs,
)
from envsuite.serve.openai_api._structured import (
    compiled,
    completion_constraint,
    refuse_on_vllm,
)
from envsuite.serve.openai_api._wire import (
    MAX_N,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    OpenAIError,
)

# -- completions ---------------------------------------------------------------------------------


def _prompts(body: CompletionRequest, served: ServedModel) -> list[list[int]]:
    prompt = body.prompt
    tokenizer = served.client.get_tokenizer()
    if isinstance(prompt, str):
        return [list(tokenizer.encode(prompt))]
    if not prompt:
        raise OpenAIError(400, "prompt is empty", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return [[int(t) for t in prompt if isinstance(t, int)]]
    if len(prompt) * (body.n or 1) > MAX_N:  # before tokenizing any of them
        raise OpenAIError(400, f"at most {MAX_N} choices per request (prompts times n)", param="prompt")
    out = [
        list(tokenizer.encode(p)) if isinstance(p, str) else [int(t) for t in p]
        for p in prompt
        if not isinstance(p, int)
    ]
    return out


def _completion_text(served: ServedModel, tokens: list[int], stops: tuple[str, ...]) -> str:
    if tokens and tokens[-1] in served.client.eos_token_ids:
        tokens = tokens[:-1]
    text = str(served.client.get_tokenizer().decode(tokens, skip_special_tokens=True))
    return cut_at_stops(text, stops)[0]


def _completion_logprobs(served: ServedModel, choice: SampledChoice) -> CompletionLogprobs:
    entries = token_logprobs(served.client.get_tokenizer(), choice.tokens, choice.logprobs, choice.top)
    offsets, at = [], 0
    for entry in entries:
        offsets.append(at)
        at += len(entry.token)
    return CompletionLogprobs(
        tokens=[e.token for e in entries],
        token_logprobs=[e.logprob for e in entries],
        top_logprobs=None
        if choice.top is None
        else [{t.token: t.logprob for t in e.top_logprobs} for e in entries],
        text_offset=offsets,
    )


@dataclass(frozen=True)
class _Completions:
    body: CompletionRequest
    served: ServedModel
    specs: list[SampleSpec]
    capture: CaptureRequest | None
    turn: Turn | None

    def headers(self) -> dict[str, str]:
        return {"X-Envsuite-Episode": self.turn.episode_id} if self.turn is not None else {}

    async def record(self, choices: list[SampledChoice]) -> None:
        if self.capture is None or self.turn is None:
            return
        stops = self.specs[0].user_stops
        captured = [
            CapturedChoice(c.tokens, c.logprobs, c.finish, _completion_text(self.served, c.tokens, stops))
            for c in choices
        ]
        await self.capture.record(
            self.turn,
            endpoint="completions",
            served=self.served,
            chat_format=None,
            params=self.body.model_dump(include=RECORDED_PARAMS | {"logprobs"}),
            prompt=self.specs[0].prompt_T,
            choices=captured,
        )


async def _prepare_completions(request: Request) -> _Completions:
    body = await parse_request(request, CompletionRequest)
    state = state_of(request)
    capture = CaptureRequest.of(request, state)
    served = await serve_model(state, body.model)
    tokenizer = served.client.get_tokenizer()
    texts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    for text in texts:
        if isinstance(text, str):
            refuse_beyond_context(served, len(text), "prompt")
    prompts = await asyncio.to_thread(_prompts, body, served)
    reply = completion_constraint(body.structured_outputs)
    refuse_on_vllm(served, reply)
    constraint = await compiled(served.client, reply)
    if capture is not None and len(prompts) > 1:
        raise OpenAIError(400, "a captured request takes one prompt (each call is one turn)", param="prompt")
    specs = []
    for i, prompt in enumerate(prompts):
        spec = build_spec(
            prompt_T=prompt,
            n=body.n,
            max_tokens=state.config.tokens_for(body.max_tokens or COMPLETIONS_DEFAULT_MAX_TOKENS),
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            stop=body.stop,
            format_stop=None,
            eos_ids=served.client.eos_token_ids,
            token_text=lambda t: str(tokenizer.decode([t], skip_special_tokens=False)),
            top_logprobs=body.logprobs or 0,
        )
        specs.append(dataclasses.replace(spec, first_index=i * spec.n, constraint=constraint))
    turn = await asyncio.to_thread(capture.place_tokens, None, specs[0].prompt_T) if capture else None
    return _Completions(body, served, specs, capture, turn)


async def completions(request: Request) -> Response:
    job = await _prepare_completions(request)
    completion_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    if job.body.stream:
        return sse(_completion_chunks(job, completion_id, created), job.headers())
    choices = await sample_all(job.served.client, job.specs, job.served.vllm)
    await job.record(choices)
    stops = job.specs[0].user_stops
    out = [
        CompletionChoice(
            index=c.index,
            text=_completion_text(job.served, c.tokens, stops),
            logprobs=_completion_logprobs(job.served, c) if job.body.logprobs is not None else None,
            finish_reason=c.finish,  # type: ignore[arg-type]
        )
        for c in choices
    ]
    usage = usage_of(sum(len(s.prompt_T) for s in job.specs), choices)
    reply = Completion(id=completion_id, created=created, model=job.served.name, choices=out, usage=usage)
    return JSONResponse(dump(reply), headers=job.headers())


async def _completion_chunks(
    job: _Completions, completion_id: str, created: int
) -> AsyncIterator[Completion]:
    served = job.served

    def chunk(choices: list[CompletionChoice], **extra: Any) -> Completion:
        return Completion(id=completion_id, created=created, model=served.name, choices=choices, **extra)

    def stream_of(index: int) -> TextStream:
        return texts.setdefault(index, TextStream(lambda t: _completion_text(served, t, ()), stops))

    stops = job.specs[0].user_stops
    texts: dict[int, TextStream] = {}
    finished: list[SampledChoice] = []
    async for event in stream_all(served.client, job.specs, served.vllm):
        if isinstance(event, ChoicesEvent):
            await job.record(event.choices)
            for choice in event.choices:
                rest = stream_of(choice.index).finish(_completion_text(served, choice.tokens, stops))
                yield chunk([CompletionChoice(index=choice.index, text=rest, finish_reason=choice.finish)])  # type: ignore[arg-type]
            finished.extend(event.choices)
            continue
        delta = stream_of(event.index).push(event.token.token)
        entries = None
        if job.body.logprobs is not None:
            single = SampledChoice(
                event.index, [event.token.token], [event.token.logprob], [event.token.top], ""
            )
            entries = _completion_logprobs(served, single)
        if delta or entries is not None:
            yield chunk(
                [CompletionChoice(index=event.index, text=delta, logprobs=entries, finish_reason=None)]
            )
    if job.body.stream_options and job.body.stream_options.include_usage:
        yield chunk([], usage=usage_of(sum(len(s.prompt_T) for s in job.specs), finished))
