"""What the OpenAI routes share: reading a body (every parameter honoured or refused), errors in
OpenAI's shape, replies as JSON or server-sent events, usage, and what a captured call records."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pydantic
from fastapi import Request, Response
from fastapi.responses import StreamingResponse

from envsuite.serve._http import describe_invalid, validate_json
from envsuite.serve.openai_api._chat import (
    ChatFormat,
)
from envsuite.serve.openai_api._models import ServedModel
from envsuite.serve.openai_api._sampling import (
    SampledChoice,
)
from envsuite.serve.openai_api._wire import (
    OPENAI_PREFIXES,
    OpenAIError,
    Usage,
    refuse_unknown,
)

PREFIXES = OPENAI_PREFIXES
RECORDED_PARAMS = {"max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "structured_outputs"}
"""Sampling parameters kept with a captured call."""
RECORDED_CHAT_PARAMS = {
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


async def parse_request(request: Request, model: type[M]) -> M:
    body = await validate_json(await request.body(), model)
    refuse_unknown(body)
    return body


def dump(model: pydantic.BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return dumped


def sse(events: AsyncIterator[pydantic.BaseModel], headers: dict[str, str]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield f"data: {json.dumps(dump(event))}\n\n".encode()
        except OpenAIError as exc:  # headers are sent: the error travels as an event (clients raise it)
            yield f"data: {json.dumps(exc.body())}\n\n".encode()
        yield b"data: [DONE]\n\n"

    headers = {"Cache-Control": "no-cache", **headers}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def usage_of(prompt_tokens: int, choices: list[SampledChoice]) -> Usage:
    completion = sum(len(c.tokens) for c in choices)
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion, total_tokens=prompt_tokens + completion
    )


def stop_ids_of(fmt: ChatFormat, served: ServedModel) -> frozenset[int]:
    own = fmt.stop()
    if own is not None and all(isinstance(s, int) for s in own):
        return frozenset(int(s) for s in own)
    return served.client.eos_token_ids if own is None else frozenset()
