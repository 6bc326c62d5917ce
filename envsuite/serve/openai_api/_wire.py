"""The OpenAI wire format, server side: the requests ``/completions`` and ``/chat/completions`` take, the
replies they give, and which parameters are honoured.

Every parameter a request carries is either honoured (``SUPPORTED``), harmless at its neutral value
(``NEUTRAL``: a zero penalty, ``store: false``, an end-user id, which ask for nothing), or refused with
a 400 that names it: a request is never served while silently ignoring what it asked for. ``null``
counts as not given. Errors use OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``),
which every OpenAI client reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length", "tool_calls"]
OPENAI_PREFIXES = ("/oai/api/v1", "/v1")
"""Where the OpenAI routes live: Tinker's address for them, and where most clients look."""
MAX_N = 64
"""Choices per request at most (each is a row of the sampling engine's batch)."""
MAX_TOP_LOGPROBS = 20


class OpenAIError(Exception):
    """An error answered in OpenAI's shape; ``param`` names the request field at fault."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is under the OpenAI routes (whose errors take OpenAI's shape)."""
    return any(path == p or path.startswith(f"{p}/") for p in OPENAI_PREFIXES)


def unsupported(param: str, why: str) -> OpenAIError:
    """The 400 for a parameter (or value) this server does not serve."""
    return OpenAIError(
        400, f"unsupported parameter {param!r}: {why}", param=param, code="unsupported_parameter"
    )


# -- requests ------------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool | None = None


class _SamplingRequest(BaseModel):
    """What both endpoints take. Unknown fields are kept (``model_extra``) to be checked, not dropped;
    numbers must be finite (a NaN temperature is refused as such, not as out of range)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    model: str = Field(min_length=1)
    """A ``tinker://`` sampler path, a live sampling session id, a checkpoint or model directory inside
    the server's allowed directories, or a base model name."""
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    """vLLM's extension, honoured here: sample from the ``top_k`` most likely tokens (-1: all)."""
    n: int | None = Field(None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    structured_outputs: dict[str, Any] | None = None
    """vLLM's extension, honoured here: one of ``json``, ``regex``, ``choice``, ``grammar``,
    ``json_object``; every sample is held to it (constrained decoding)."""


class ChatMessageIn(BaseModel):
    """One message of a chat request (text content as a string or as text parts)."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatRequest(_SamplingRequest):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    renderer: str | None = None
    """envsuite's extension: render with this envsuite renderer (``envsuite.renderers``) instead of the
    model's own chat template."""
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    """``text``, ``json_object`` or ``json_schema``: enforced by constrained decoding."""


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=5)


def _zero(value: object) -> bool:
    return value == 0


NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "frequency_penalty": _zero,
    "presence_penalty": _zero,
    "logit_bias": lambda v: not v,
    "user": lambda v: True,  # an end-user id, for abuse monitoring: changes nothing sampled
    "store": lambda v: v is False,
    "metadata": lambda v: True,  # labels for stored completions; nothing is stored
    "service_tier": lambda v: v in ("auto", "default"),
    "response_format": lambda v: v == {"type": "text"},  # /completions; chat honours it
    "modalities": lambda v: v == ["text"],
    "echo": lambda v: v is False,
    "best_of": lambda v: v == 1,
    "suffix": lambda v: v == "",
}
"""Parameters accepted only at a value that asks for nothing (anything else is a 400 naming them)."""


def refuse_unknown(request: BaseModel) -> None:
    """Raise the 400 for the first field the request carries that is neither honoured nor neutral."""
    for name, value in (request.model_extra or {}).items():
        if value is None:
            continue
        neutral = NEUTRAL.get(name)
        if neutral is None:
            raise unsupported(name, "this server does not implement it")
        if not neutral(value):
            raise unsupported(name, f"only its neutral value is accepted here, got {value!r}")


# -- replies -------------------------------------------------------------------------------------


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """Each call whole, with its ``index`` in the reply (sent once the reply has ended)."""


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "envsuite"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
