"""Qwen3: ChatML whose assistant turns may open with a ``<think>...</think>`` reasoning block.

Convention: reasoning lives in ``Message["thinking"]`` and ``content`` holds only the answer.
:meth:`Qwen3Renderer.parse_response` splits a sampled ``<think>...</think>`` block out of the reply
into ``thinking``; on input, an assistant message without a ``thinking`` key whose content *starts*
with a closed ``<think>...</think>`` block is split the same way. A present ``thinking`` key (even
empty) renders as ``<think>\\n{thinking}\\n</think>\\n\\n{content}``; no key renders content only.

With ``strip_thinking_from_history=True`` (Qwen3's own behaviour) reasoning is dropped from assistant
turns that precede the last user message, so a later prompt no longer contains the reasoning the
model sampled earlier: the extension property does not hold, and multi-turn prompts are re-rendered.

Tools: Qwen3's own format (``chatml``'s Hermes/Qwen format: a ``# Tools`` system block, ``<tool_call>``
JSON objects, ``<tool_response>`` results in a ``user`` turn), checked against Qwen3's chat template.
"""

from __future__ import annotations

from dataclasses import dataclass

from envsuite.chat import Message, tool_calls_of
from envsuite.renderers._chatml import ChatMLRenderer
from envsuite.renderers._common import last_index_of
from envsuite.renderers.base import Tokenizer

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class SplitReply:
    content: str
    thinking: str | None
    """None when the text had no reasoning block."""


def split_thinking(text: str, allow_unclosed: bool) -> SplitReply:
    """Separate a leading reasoning block from the answer.

    ``allow_unclosed`` treats a block cut off before ``</think>`` (a truncated reply) as all reasoning,
    and text before a lone ``</think>`` as reasoning.
    """
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        inner = stripped[len(THINK_OPEN) :]
        close = inner.find(THINK_CLOSE)
        if close >= 0:
            return SplitReply(inner[close + len(THINK_CLOSE) :].lstrip("\n"), inner[:close].strip("\n"))
        if allow_unclosed:
            return SplitReply("", inner.strip("\n"))
        return SplitReply(text, None)
    close = text.find(THINK_CLOSE)
    if allow_unclosed and close >= 0 and THINK_OPEN not in text[:close]:
        return SplitReply(text[close + len(THINK_CLOSE) :].lstrip("\n"), text[:close].strip("\n"))
    return SplitReply(text, None)


class Qwen3Renderer(ChatMLRenderer):
    """Qwen3's chat format with its reasoning blocks."""

    name = "qwen3"

    def __init__(self, tokenizer: Tokenizer, strip_thinking_from_history: bool = True) -> None:
        super().__init__(tokenizer)
        self.strip_thinking_from_history = strip_thinking_from_history
        self.has_extension_property = not strip_thinking_from_history

    def _body_tokens(self, messages: list[Message], index: int) -> list[int]:
        message = messages[index]
        if message["role"] != "assistant":
            return self.codec.text(message["content"])
        calls = tool_calls_of(message)
        if "thinking" in message:
            reply = SplitReply(message["content"], message["thinking"])
        else:
            reply = split_thinking(message["content"], allow_unclosed=False)
        last_user = last_index_of(messages, "user")
        in_history = last_user is not None and index < last_user
        if reply.thinking is None or (self.strip_thinking_from_history and in_history):
            return self._content_with_calls(reply.content, calls)
        return (
            self.codec.marker(THINK_OPEN)
            + self.codec.text(f"\n{reply.thinking}\n")
            + self.codec.marker(THINK_CLOSE)
            + self.codec.literal("\n\n")
            + self._content_with_calls(reply.content, calls)
        )

    def _message_from_text(self, text: str) -> Message:
        reply = split_thinking(text, allow_unclosed=True)
        base: Message = {"role": "assistant", "content": reply.content}
        if reply.thinking is not None:
            base["thinking"] = reply.thinking
        return self._split_tool_calls(reply.content).message(base)
