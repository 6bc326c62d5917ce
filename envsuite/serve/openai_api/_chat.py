"""Chat requests to prompt tokens, and sampled tokens back to the assistant's reply.

A chat request renders in one of two :class:`ChatFormat` s: the model's own Hugging Face chat template
(:class:`TemplateFormat`, the default, as Tinker's OpenAI-compatible endpoint does), or an envsuite
renderer named in the request's ``renderer`` field (:class:`RendererFormat`, the chat format envsuite's
envs and trainer use). A tokenizer without a chat template falls back to the model's envsuite renderer.

Tool calling lives here too (``_oai_structured`` reads the request's ``tools`` and ``tool_choice``):
:func:`to_messages` reads assistant ``tool_calls`` and
``tool`` messages, and a request with tools renders with an envsuite renderer (the one named, else the
model's own), because only a renderer both writes the definitions in the family's format and parses the
calls back out of sampled tokens (:attr:`AssistantReply.tool_calls`, OpenAI-shaped, each with an id).
Capture needs nothing more: it records prompt and sampled token ids, whatever the messages held.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from envsuite.chat import Message, StopCondition, ToolCall, ToolSpec, as_tool_call
from envsuite.serve.openai_api._wire import ChatMessageIn, OpenAIError, unsupported

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envsuite.renderers import Renderer

TEMPLATE_FORMAT = "chat_template"
"""The name recorded for requests rendered with the model's own chat template."""
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
_EXTRAS = {"assistant": ("tool_calls",), "tool": ("tool_call_id",)}
"""Message fields besides role, content and name that a role may carry."""


@dataclass(frozen=True)
class AssistantReply:
    """A sampled reply as the client sees it."""

    content: str
    tool_calls: list[dict[str, object]] = field(default_factory=list)
    """OpenAI ``tool_calls`` parsed from the reply (only for requests with tools)."""


def uses_tools(messages: list[Message]) -> bool:
    """Whether the conversation holds tool calls or tool results (which only a renderer can write)."""
    return any(m["role"] == "tool" or m.get("tool_calls") for m in messages)


def to_messages(messages: list[ChatMessageIn]) -> list[Message]:
    """The request's messages as envsuite messages (text, tool calls and tool results), refusing what
    cannot be rendered."""
    out: list[Message] = []
    called: set[str] = set()
    """Ids of the tool calls made so far: a tool message answers one of them, as OpenAI requires."""
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = _ROLES.get(message.role)
        if role is None:
            raise OpenAIError(400, f"{where}.role: unknown role {message.role!r}", param=f"{where}.role")
        extras = {k: v for k, v in (message.model_extra or {}).items() if v is not None and v != []}
        for key in sorted(set(extras) - set(_EXTRAS.get(role, ()))):
            raise unsupported(f"{where}.{key}", f"not rendered in a {message.role} message")
        if message.name is not None and role != "tool":
            raise unsupported(f"{where}.name", "participant names are not rendered by this server")
        converted = Message(role=role, content=_text(message, where))
        if role == "assistant" and "tool_calls" in extras:
            converted["tool_calls"] = _tool_calls(extras["tool_calls"], f"{where}.tool_calls")
            called.update(call["id"] for call in converted["tool_calls"] if call.get("id"))
        if role == "tool":
            call_id = extras.get("tool_call_id")
            if not isinstance(call_id, str):
                raise OpenAIError(400, f"{where}.tool_call_id is missing", param=f"{where}.tool_call_id")
            if call_id not in called:
                raise OpenAIError(
                    400,
                    f"{where}.tool_call_id {call_id[:100]!r} answers no tool call of an earlier assistant "
                    "message (a tool message must follow the assistant message whose tool_calls name it)",
                    param=f"{where}.tool_call_id",
                )
            converted["tool_call_id"] = call_id
            if message.name is not None:
                converted["name"] = message.name
        out.append(converted)
    return out


def _tool_calls(calls: object, where: str) -> list[ToolCall]:
    if not isinstance(calls, list):
        raise OpenAIError(400, f"{where} must be a list", param=where)
    try:
        return [as_tool_call(call) for call in calls]
    except (TypeError, ValueError) as exc:
        raise OpenAIError(400, f"{where}: {exc}", param=where) from exc


def _text(message: ChatMessageIn, where: str) -> str:
    content = message.content
    if content is None:
        if message.role == "assistant":
            return ""
        raise OpenAIError(400, f"{where}.content is missing", param=f"{where}.content")
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise unsupported(f"{where}.content[{j}].type", "only text parts are served here")
        texts.append(part["text"])
    return "\n".join(texts)


class ChatFormat(ABC):
    """How one model's chat requests become tokens, and its sampled tokens a reply."""

    name: str
    """``chat_template`` or the envsuite renderer's name (recorded with captured calls)."""

    @abstractmethod
    def prompt(self, messages: list[Message]) -> list[int]:
        """Tokens of ``messages`` (and the request's tools) followed by the opening of the assistant's turn."""

    @abstractmethod
    def stop(self) -> StopCondition | None:
        """Where the assistant's turn ends: token ids or strings; None for the model's end-of-sequence."""

    @abstractmethod
    def reply(self, tokens: list[int]) -> AssistantReply:
        """The reply in sampled ``tokens`` (the stop token, if sampled, included); never raises."""

    def parses_tools(self) -> bool:
        """Whether replies are parsed for tool calls (a streamed reply's text is then held to its end)."""
        return False

    def extend(self, prompt: list[int], reply: list[int], messages: list[Message]) -> list[int] | None:
        """The prompt for ``messages`` written as ``prompt + reply + the rest``, where ``prompt`` and the
        sampled ``reply`` were an earlier turn of this conversation and ``messages`` repeats that reply as
        an assistant message: the model then sees its own sampled tokens again rather than a
        re-tokenization of their text. None where this format cannot say the result is what it would
        render (the caller renders ``messages`` plainly)."""
        return None


class TemplateFormat(ChatFormat):
    """The tokenizer's own Jinja chat template (``apply_chat_template``)."""

    name = TEMPLATE_FORMAT

    def __init__(self, tokenizer: PreTrainedTokenizerBase, eos_ids: frozenset[int]) -> None:
        self.tokenizer, self.eos_ids = tokenizer, eos_ids

    def text(self, messages: list[Message], generation: bool = True) -> str:
        try:
            rendered = self.tokenizer.apply_chat_template(
                cast("list[dict[str, str]]", messages), tokenize=False, add_generation_prompt=generation
            )
        except Exception as exc:  # the template's own checks (e.g. alternating roles) raise freely
            raise OpenAIError(
                400, f"the model's chat template refused these messages: {exc}", param="messages"
            ) from exc
        return str(rendered)

    def prompt(self, messages: list[Message]) -> list[int]:
        return list(self.tokenizer.encode(self.text(messages), add_special_tokens=False))

    def stop(self) -> StopCondition | None:
        return None

    def reply(self, tokens: list[int]) -> AssistantReply:
        if tokens and tokens[-1] in self.eos_ids:
            tokens = tokens[:-1]
        return AssistantReply(str(self.tokenizer.decode(tokens, skip_special_tokens=True)))

    def extend(self, prompt: list[int], reply: list[int], messages: list[Message]) -> list[int] | None:
        # The earlier prompt's text plus the reply's text (special tokens kept) must begin the text the
        # template renders now; then only what follows it is tokenized. A template that rewrites earlier
        # turns (stripping whitespace or reasoning) fails the check and renders plainly.
        earlier = str(self.tokenizer.decode(prompt + reply, skip_special_tokens=False))
        now = self.text(messages)
        if not now.startswith(earlier) or len(now) == len(earlier):
            return None
        return prompt + reply + list(self.tokenizer.encode(now[len(earlier) :], add_special_tokens=False))


class RendererFormat(ChatFormat):
    """An envsuite renderer (``envsuite.renderers``): the chat format of envsuite's envs and trainer, and
    the one that serves tools (``tools``: the request's definitions; none: replies are plain text)."""

    def __init__(self, renderer: Renderer, tools: list[ToolSpec] | None = None) -> None:
        self.renderer = renderer
        self.name = renderer.name
        self.tools = tools or []

    def prompt(self, messages: list[Message]) -> list[int]:
        try:
            return list(self.renderer.build_generation_prompt(messages, tools=self.tools or None).to_ints())
        except (ValueError, TypeError) as exc:
            raise OpenAIError(400, f"renderer {self.name!r}: {exc}", param="messages") from exc

    def stop(self) -> StopCondition | None:
        return self.renderer.get_stop_sequences()

    def parses_tools(self) -> bool:
        return bool(self.tools)

    def reply(self, tokens: list[int]) -> AssistantReply:
        message = self.renderer.parse_response(tokens).message
        calls, unread = message.get("tool_calls") or [], message.get("unparsed_tool_calls") or []
        if not self.tools:
            if calls or unread:  # the request offered no tools: what the model wrote is plain text
                return AssistantReply(self._plain_text(tokens))
            return AssistantReply(message["content"])
        # A call the renderer could not read stays in the text, so the client sees what the model wrote.
        content = "".join(
            [message["content"], *(c.raw_text for c in unread if c.raw_text not in message["content"])]
        )
        return AssistantReply(
            content,
            [
                {
                    "id": c.id or f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": dict(c.function),
                }
                for c in calls
            ],
        )

    def _plain_text(self, tokens: list[int]) -> str:
        stops = set(self.stop() or [])
        kept = tokens[:-1] if tokens and tokens[-1] in stops else tokens
        return str(self.renderer.tokenizer.decode(kept, skip_special_tokens=True))

    def extend(self, prompt: list[int], reply: list[int], messages: list[Message]) -> list[int] | None:
        if not self.renderer.has_extension_property:
            return None
        import tinker

        return list(
            self.renderer.build_next_prompt(
                tinker.ModelInput.from_ints(prompt), reply, messages, tools=self.tools or None
            ).to_ints()
        )


def chat_format(
    tokenizer: PreTrainedTokenizerBase,
    base_model: str,
    eos_ids: frozenset[int],
    renderer: str | None,
    tools: list[ToolSpec] | None = None,
    messages: list[Message] | None = None,
) -> ChatFormat:
    """The format a request renders in: the named envsuite renderer, else the model's chat template, else
    (a tokenizer without one) the model's default envsuite renderer. Requests with tools, or whose
    conversation holds tool calls or results, render with a renderer (the named one, else the model's)."""
    from envsuite.models import default_renderer_name
    from envsuite.renderers import Tokenizer, get_renderer

    tooled = bool(tools) or uses_tools(messages or [])
    if renderer is None and not tooled and getattr(tokenizer, "chat_template", None):
        return TemplateFormat(tokenizer, eos_ids)
    name = renderer if renderer is not None else default_renderer_name(base_model)
    try:
        return RendererFormat(get_renderer(name, cast("Tokenizer", tokenizer)), tools)
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param="renderer") from exc
