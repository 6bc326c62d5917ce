"""``/chat/completions``: a chat request rendered (``_chat``), shaped (``_structured``), sampled
(``_sampling``) and, when captured, recorded with its exact token ids (``capture._requests``); the reply as
JSON or, with ``stream``, server-sent events (text held back until settled; calls sent whole at the end)."""

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
from envsuite.chat import Message
from envsuite.serve._config import ServeConfig
from envsuite.serve._http import state_of
from envsuite.serve.capture._requests import CaptureRequest, Turn
from envsuite.serve.openai_api._chat import (
    AssistantReply,
    ChatFormat,
    RendererFormat,
    chat_format,
    to_messages,
)
from envsuite.serve.openai_api._http import (
    RECORDED_CHAT_PARAMS,
    RECORDED_PARAMS,
    dump,
    parse_request,
    sse,
    stop_ids_of,
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
    ToolRequest,
    compiled,
    read_tools,
    refuse_on_vllm,
    reply_constraint,
)
from envsuite.serve.openai_api._wire import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    OpenAIError,
)

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
    body = await parse_request(request, ChatRequest)
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
    reply = reply_constraint(body, tools, renderer)
    refuse_on_vllm(served, reply)
    constraint = await compiled(client, reply)
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
        params=chat.body.model_dump(include=RECORDED_PARAMS | RECORDED_CHAT_PARAMS),
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
        return sse(_chat_chunks(chat, completion_id, created), chat.headers())
    choices = await sample_all(chat.served.client, [chat.spec], chat.served.vllm)
    await _record_chat(chat, choices)
    stop_ids = stop_ids_of(chat.fmt, chat.served)
    out = []
    for choice in choices:
        reply, finish = chat_reply(chat.fmt, choice, chat.spec.user_stops)
        logprobs = _content_logprobs(chat.served, choice, stop_ids) if chat.body.logprobs else None
        message = AssistantMessage(content=reply.content, tool_calls=reply.tool_calls or None)
        out.append(ChatChoice(index=choice.index, message=message, logprobs=logprobs, finish_reason=finish))  # type: ignore[arg-type]
    usage = usage_of(len(chat.spec.prompt_T), choices)
    completion = ChatCompletion(
        id=completion_id, created=created, model=chat.served.name, choices=out, usage=usage
    )
    return JSONResponse(dump(completion), headers=chat.headers())


async def _chat_chunks(chat: _Chat, completion_id: str, created: int) -> AsyncIterator[ChatCompletionChunk]:
    def chunk(choices: list[ChunkChoice], **extra: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=completion_id, created=created, model=chat.served.name, choices=choices, **extra
        )

    fmt, spec = chat.fmt, chat.spec
    stop_ids = stop_ids_of(fmt, chat.served)
    tokenizer = chat.served.client.get_tokenizer()
    texts = [TextStream(lambda tokens: fmt.reply(tokens).content, spec.user_stops) for _ in range(spec.n)]
    # Whether a reply calls a tool is known only when it ends: with tools its text is sent then, whole.
    held = fmt.parses_tools()
    yield chunk([ChunkChoice(index=i, delta=ChunkDelta(role="assistant", content="")) for i in range(spec.n)])
    async for event in stream_all(chat.served.client, [spec], chat.served.vllm):
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
                yield chunk([], usage=usage_of(len(spec.prompt_T), event.choices))
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
