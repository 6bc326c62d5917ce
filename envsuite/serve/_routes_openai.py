"""OpenAI-compatible routes: ``/completions``, ``/chat/completions`` and ``/models``, under
``/oai/api/v1`` (Tinker's address for them) and ``/v1`` (where most clients look).

They share the server's key check, body limit and samplers with the Tinker routes. A request is
validated (every parameter honoured or refused, ``_oai_wire``), its model loaded (``_oai_models``),
its messages rendered (``_oai_chat``), sampled (``_oai_sampling``) and, when the request is captured,
recorded with its exact token ids (``_capture_http``). Replies are OpenAI's JSON, or server-sent
events when ``stream`` is set (with a final usage chunk when ``stream_options.include_usage``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from envsuite.capture import CapturedChoice
from envsuite.chat import Message
from envsuite.serve._capture_http import CaptureRequest, Turn
from envsuite.serve._config import ServeConfig
from envsuite.serve._http import describe_invalid, state_of, validate_json
from envsuite.serve._oai_chat import AssistantReply, ChatFormat, RendererFormat, chat_format, to_messages
from envsuite.serve._oai_models import ServedModel, list_models, refuse_beyond_context, serve_model
from envsuite.serve._oai_sampling import (
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
from envsuite.serve._oai_structured import (
    ToolRequest,
    compiled,
    completion_constraint,
    read_tools,
    reply_constraint,
)
from envsuite.serve._oai_wire import (
    MAX_N,
    OPENAI_PREFIXES,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    OpenAIError,
    Usage,
    refuse_unknown,
)

router = APIRouter()
PREFIXES = OPENAI_PREFIXES
_RECORDED_PARAMS = {"max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "structured_outputs"}
"""Sampling parameters kept with a captured call."""
_RECORDED_CHAT_PARAMS = {
    "max_completion_tokens",
    "renderer",
    "response_format",
    "tool_choice",
    "parallel_tool_calls",
}
"""And a chat call's: what shaped its reply (a constrained reply is told apart from a free one)."""
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for ``/completions`` (chat replies default to the engine's budget, 1024)."""
M = TypeVar("M", bound=pydantic.BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


def openai_errors(handler: Handler) -> Handler:
    """Answer a bad body in OpenAI's error shape, naming the field at fault."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except pydantic.ValidationError as exc:
            invalid = describe_invalid(exc)
            raise OpenAIError(400, invalid.message, param=invalid.param) from exc
        except json.JSONDecodeError as exc:
            raise OpenAIError(400, f"the body is not valid JSON: {exc}") from exc

    return wrapped


async def _parse(request: Request, model: type[M]) -> M:
    body = await validate_json(await request.body(), model)
    refuse_unknown(body)
    return body


def _dump(model: pydantic.BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return dumped


def _sse(events: AsyncIterator[pydantic.BaseModel], headers: dict[str, str]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield f"data: {json.dumps(_dump(event))}\n\n".encode()
        except OpenAIError as exc:  # headers are sent: the error travels as an event (clients raise it)
            yield f"data: {json.dumps(exc.body())}\n\n".encode()
        yield b"data: [DONE]\n\n"

    headers = {"Cache-Control": "no-cache", **headers}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def _usage(prompt_tokens: int, choices: list[SampledChoice]) -> Usage:
    completion = sum(len(c.tokens) for c in choices)
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion, total_tokens=prompt_tokens + completion
    )


def _stop_ids(fmt: ChatFormat, served: ServedModel) -> frozenset[int]:
    own = fmt.stop()
    if own is not None and all(isinstance(s, int) for s in own):
        return frozenset(int(s) for s in own)
    return served.client.eos_token_ids if own is None else frozenset()


# -- chat ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chat:
    """A chat request ready to sample: its model, format, prompt and (when captured) its episode."""

    body: ChatRequest
    served: ServedModel
    fmt: ChatFormat
    messages: list[Message]
    spec: SampleSpec
    capture: CaptureRequest | None
    turn: Turn | None

    def headers(self) -> dict[str, str]:
        return {"X-Envsuite-Episode": self.turn.episode_id} if self.turn is not None else {}


def _chat_spec(
    body: ChatRequest, prompt: list[int], fmt: ChatFormat, served: ServedModel, config: ServeConfig
) -> SampleSpec:
    if body.top_logprobs and not body.logprobs:
        raise OpenAIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    tokenizer = served.client.get_tokenizer()
    return build_spec(
        prompt_T=prompt,
        n=body.n,
        max_tokens=config.tokens_for(body.max_completion_tokens or body.max_tokens),
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stop,
        format_stop=fmt.stop(),
        eos_ids=served.client.eos_token_ids,
        token_text=lambda t: str(tokenizer.decode([t], skip_special_tokens=False)),
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0,
    )


def _chat_prompt(
    capture: CaptureRequest | None,
    turn: Turn | None,
    fmt: ChatFormat,
    served: ServedModel,
    messages: list[Message],
) -> list[int]:
    prompt = None
    if capture is not None and turn is not None:
        prompt = capture.spliced_prompt(turn, fmt, served, messages)
    return prompt or fmt.prompt(messages)


def _read_chat(body: ChatRequest) -> tuple[ToolRequest, list[Message]]:
    return read_tools(body), to_messages(body.messages)


async def _prepare_chat(request: Request) -> _Chat:
    body = await _parse(request, ChatRequest)
    tools, messages = await asyncio.to_thread(_read_chat, body)  # a long conversation takes a while
    state = state_of(request)
    capture = CaptureRequest.of(request, state)
    served = await serve_model(state, body.model)
    refuse_beyond_context(served, sum(len(m["content"]) for m in messages), "messages")
    client = served.client
    fmt = chat_format(
        client.get_tokenizer(), served.base_model, client.eos_token_ids, body.renderer, tools.specs, messages
    )
    renderer = fmt.renderer if isinstance(fmt, RendererFormat) else None
    constraint = await compiled(client, reply_constraint(body, tools, renderer))
    # Placing a call may read the capture set's files (the first time), and rendering a long
    # conversation tokenizes megabytes: both off the event loop.
    turn = await asyncio.to_thread(capture.place_chat, messages) if capture is not None else None
    prompt = await asyncio.to_thread(_chat_prompt, capture, turn, fmt, served, messages)
    if capture is not None:
        turn = await asyncio.to_thread(capture.place_tokens, turn, prompt)
    spec = dataclasses.replace(_chat_spec(body, prompt, fmt, served, state.config), constraint=constraint)
    return _Chat(body, served, fmt, messages, spec, capture, turn)


def chat_reply(fmt: ChatFormat, choice: SampledChoice, stops: tuple[str, ...]) -> tuple[AssistantReply, str]:
    """A choice's reply as the client sees it, and its finish reason."""
    reply = fmt.reply(choice.tokens)
    content, _ = cut_at_stops(reply.content, stops)
    finish = "tool_calls" if reply.tool_calls else choice.finish
    return AssistantReply(content, reply.tool_calls), finish


async def _record_chat(chat: _Chat, choices: list[SampledChoice]) -> None:
    if chat.capture is None or chat.turn is None:
        return
    captured = []
    for choice in choices:
        reply, finish = chat_reply(chat.fmt, choice, chat.spec.user_stops)
        captured.append(
            CapturedChoice(choice.tokens, choice.logprobs, finish, reply.content, reply.tool_calls)
        )
    await chat.capture.record(
        chat.turn,
        endpoint="chat.completions",
        served=chat.served,
        chat_format=chat.fmt.name,
        params=chat.body.model_dump(include=_RECORDED_PARAMS | _RECORDED_CHAT_PARAMS),
        prompt=chat.spec.prompt_T,
        choices=captured,
        conversation=chat.messages,
    )


def _content_logprobs(served: ServedModel, choice: SampledChoice, stop_ids: frozenset[int]) -> ChoiceLogprobs:
    n = len(choice.tokens) - (1 if choice.tokens and choice.tokens[-1] in stop_ids else 0)
    top = None if choice.top is None else choice.top[:n]
    tokenizer = served.client.get_tokenizer()
    return ChoiceLogprobs(content=token_logprobs(tokenizer, choice.tokens[:n], choice.logprobs[:n], top))


async def chat_completions(request: Request) -> Response:
    chat = await _prepare_chat(request)
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if chat.body.stream:
        return _sse(_chat_chunks(chat, completion_id, created), chat.headers())
    choices = await sample_all(chat.served.client, [chat.spec])
    await _record_chat(chat, choices)
    stop_ids = _stop_ids(chat.fmt, chat.served)
    out = []
    for choice in choices:
        reply, finish = chat_reply(chat.fmt, choice, chat.spec.user_stops)
        logprobs = _content_logprobs(chat.served, choice, stop_ids) if chat.body.logprobs else None
        message = AssistantMessage(content=reply.content, tool_calls=reply.tool_calls or None)
        out.append(ChatChoice(index=choice.index, message=message, logprobs=logprobs, finish_reason=finish))  # type: ignore[arg-type]
    usage = _usage(len(chat.spec.prompt_T), choices)
    completion = ChatCompletion(
        id=completion_id, created=created, model=chat.served.name, choices=out, usage=usage
    )
    return JSONResponse(_dump(completion), headers=chat.headers())


async def _chat_chunks(chat: _Chat, completion_id: str, created: int) -> AsyncIterator[ChatCompletionChunk]:
    def chunk(choices: list[ChunkChoice], **extra: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=completion_id, created=created, model=chat.served.name, choices=choices, **extra
        )

    fmt, spec = chat.fmt, chat.spec
    stop_ids = _stop_ids(fmt, chat.served)
    tokenizer = chat.served.client.get_tokenizer()
    texts = [TextStream(lambda tokens: fmt.reply(tokens).content, spec.user_stops) for _ in range(spec.n)]
    # Whether a reply calls a tool is known only when it ends: with tools its text is sent then, whole.
    held = fmt.parses_tools()
    yield chunk([ChunkChoice(index=i, delta=ChunkDelta(role="assistant", content="")) for i in range(spec.n)])
    async for event in stream_all(chat.served.client, [spec]):
        if isinstance(event, ChoicesEvent):
            await _record_chat(chat, event.choices)
            for choice in event.choices:
                reply, finish = chat_reply(fmt, choice, spec.user_stops)
                rest = texts[choice.index].finish(reply.content)
                if rest:
                    yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(content=rest))])
                if reply.tool_calls:
                    calls = [{"index": k, **call} for k, call in enumerate(reply.tool_calls)]
                    yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(tool_calls=calls))])
                yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(), finish_reason=finish)])  # type: ignore[arg-type]
            if chat.body.stream_options and chat.body.stream_options.include_usage:
                yield chunk([], usage=_usage(len(spec.prompt_T), event.choices))
            continue
        sampled = event.token
        delta = "" if held else texts[event.index].push(sampled.token)
        entries = None
        if chat.body.logprobs and sampled.token not in stop_ids:
            entries = ChoiceLogprobs(
                content=token_logprobs(tokenizer, [sampled.token], [sampled.logprob], [sampled.top])
            )
        if delta or entries is not None:
            yield chunk([ChunkChoice(index=event.index, delta=ChunkDelta(content=delta), logprobs=entries)])


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
            params=self.body.model_dump(include=_RECORDED_PARAMS | {"logprobs"}),
            prompt=self.specs[0].prompt_T,
            choices=captured,
        )


async def _prepare_completions(request: Request) -> _Completions:
    body = await _parse(request, CompletionRequest)
    state = state_of(request)
    capture = CaptureRequest.of(request, state)
    served = await serve_model(state, body.model)
    tokenizer = served.client.get_tokenizer()
    texts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    for text in texts:
        if isinstance(text, str):
            refuse_beyond_context(served, len(text), "prompt")
    prompts = await asyncio.to_thread(_prompts, body, served)
    constraint = await compiled(served.client, completion_constraint(body.structured_outputs))
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
        return _sse(_completion_chunks(job, completion_id, created), job.headers())
    choices = await sample_all(job.served.client, job.specs)
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
    usage = _usage(sum(len(s.prompt_T) for s in job.specs), choices)
    reply = Completion(id=completion_id, created=created, model=job.served.name, choices=out, usage=usage)
    return JSONResponse(_dump(reply), headers=job.headers())


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
    async for event in stream_all(served.client, job.specs):
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
        yield chunk([], usage=_usage(sum(len(s.prompt_T) for s in job.specs), finished))


# -- models --------------------------------------------------------------------------------------


async def models(request: Request) -> Response:
    return JSONResponse(_dump(await asyncio.to_thread(list_models, state_of(request))))


for _prefix in PREFIXES:
    router.add_api_route(f"{_prefix}/chat/completions", openai_errors(chat_completions), methods=["POST"])
    router.add_api_route(f"{_prefix}/completions", openai_errors(completions), methods=["POST"])
    router.add_api_route(f"{_prefix}/models", models, methods=["GET"])
