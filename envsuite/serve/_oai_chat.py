"""Chat requests to prompt tokens, and sampled tokens back to the assistant's reply.

A chat request renders in one of two :class:`ChatFormat` s: the model's own Hugging Face chat template
(:class:`TemplateFormat`, the default, as Tinker's OpenAI-compatible endpoint does), or an envsuite
renderer named in the request's ``renderer`` field (:class:`RendererFormat`, the chat format envsuite's
envs and trainer use). A tokenizer without a chat template falls back to the model's envsuite renderer.

Tool calling plugs in here, and only here: :func:`check_tools` (which refuses ``tools`` and
``tool_choice`` until the renderers define tools in the prompt and parse tool calls from sampled
tokens), :func:`to_messages` (assistant ``tool_calls`` and ``tool`` messages), the ``tools`` argument
of :meth:`ChatFormat.prompt`, and :attr:`AssistantReply.tool_calls`, filled by :meth:`ChatFormat.reply`.
Capture needs nothing more: it records prompt and sampled token ids, whatever the messages held.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from envsuite.chat import Message, StopCondition
from envsuite.serve._oai_wire import ChatMessageIn, ChatRequest, OpenAIError, unsupported

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envsuite.renderers import Renderer

TEMPLATE_FORMAT = "chat_template"
"""The name recorded for requests rendered with the model's own chat template."""
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True)
class AssistantReply:
    """A sampled reply as the client sees it."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI ``tool_calls`` parsed from the reply (always empty until the renderers parse tools)."""


def check_tools(request: ChatRequest) -> None:
    """Refuse ``tools``/``tool_choice``: the seam where the renderers' tool support plugs in."""
    if request.tools:
        raise unsupported("tools", "tool calling is not available on this server yet")
    if request.tool_choice not in (None, "none"):
        raise unsupported("tool_choice", "tool calling is not available on this server yet")


def to_messages(messages: list[ChatMessageIn]) -> list[Message]:
    """The request's messages as envsuite messages (text only), refusing what cannot be rendered."""
    out: list[Message] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = _ROLES.get(message.role)
        if role is None:
            if message.role == "tool":
                raise unsupported(f"{where}.role", "tool messages need tool calling, not available yet")
            raise OpenAIError(400, f"{where}.role: unknown role {message.role!r}", param=f"{where}.role")
        for key, value in (message.model_extra or {}).items():
            if value is not None and value != []:
                raise unsupported(f"{where}.{key}", "this server renders text messages only")
        if message.name is not None:
            raise unsupported(f"{where}.name", "participant names are not rendered by this server")
        out.append(Message(role=role, content=_text(message, where)))
    return out


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
    def prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Tokens of ``messages`` followed by the opening of the assistant's turn."""

    @abstractmethod
    def stop(self) -> StopCondition | None:
        """Where the assistant's turn ends: token ids or strings; None for the model's end-of-sequence."""

    @abstractmethod
    def reply(self, tokens: list[int]) -> AssistantReply:
        """The reply in sampled ``tokens`` (the stop token, if sampled, included); never raises."""

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

    def prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
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
    """An envsuite renderer (``envsuite.renderers``): the chat format of envsuite's envs and trainer."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.name = renderer.name

    def prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        try:
            return list(self.renderer.build_generation_prompt(messages).to_ints())
        except (ValueError, TypeError) as exc:
            raise OpenAIError(400, f"renderer {self.name!r}: {exc}", param="messages") from exc

    def stop(self) -> StopCondition | None:
        return self.renderer.get_stop_sequences()

    def reply(self, tokens: list[int]) -> AssistantReply:
        return AssistantReply(self.renderer.parse_response(tokens).message["content"])

    def extend(self, prompt: list[int], reply: list[int], messages: list[Message]) -> list[int] | None:
        if not self.renderer.has_extension_property:
            return None
        import tinker

        return list(
            self.renderer.build_next_prompt(tinker.ModelInput.from_ints(prompt), reply, messages).to_ints()
        )


def chat_format(
    tokenizer: PreTrainedTokenizerBase, base_model: str, eos_ids: frozenset[int], renderer: str | None
) -> ChatFormat:
    """The format a request renders in: the named envsuite renderer, else the model's chat template, else
    (a tokenizer without one) the model's default envsuite renderer."""
    from envsuite.models import default_renderer_name
    from envsuite.renderers import Tokenizer, get_renderer

    if renderer is None and getattr(tokenizer, "chat_template", None):
        return TemplateFormat(tokenizer, eos_ids)
    name = renderer if renderer is not None else default_renderer_name(base_model)
    try:
        return RendererFormat(get_renderer(name, cast("Tokenizer", tokenizer)))
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param="renderer") from exc
