"""ChatML (``<|im_start|>role\\n...<|im_end|>``), as used by SmolLM2 and Qwen2.5.

The newline that follows each ``<|im_end|>`` is rendered at the start of the *next* turn's header, so
an assistant turn ends exactly at its end-of-turn token: a sampled reply (content + ``<|im_end|>``) is
then the whole turn and every later prompt extends the earlier one token for token.
"""

from __future__ import annotations

from envsuite.chat import Message, Role
from envsuite.renderers._common import Segment, SegmentRenderer

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class ChatMLRenderer(SegmentRenderer):
    """Plain ChatML: no default system message, no begin-of-text marker."""

    name = "chatml"
    has_extension_property = True
    end_of_turn = IM_END

    def _turn_header(self, messages: list[Message], role: Role, preceded: bool) -> list[int]:
        newline = self.codec.literal("\n") if preceded else []
        return newline + self.codec.marker(IM_START) + self.codec.literal(f"{role}\n")

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        message = messages[index]
        header = Segment(self._turn_header(messages, message["role"], preceded), index)
        body = self._body_tokens(messages, index) + self.codec.marker(IM_END)
        return [header, Segment(body, index, trainable=message["role"] == "assistant")]

    def _body_tokens(self, messages: list[Message], index: int) -> list[int]:
        return self.codec.text(messages[index]["content"])


class SmolLM2ChatMLRenderer(ChatMLRenderer):
    """ChatML with SmolLM2's default system message, inserted when the conversation opens without one.

    This reproduces SmolLM2's shipped chat template token for token (except that the template's final
    newline after a conversation's last ``<|im_end|>`` belongs to no turn and is not rendered).
    """

    name = "chatml-smollm2"

    def _prefix(self, messages: list[Message]) -> list[Segment]:
        if not messages or messages[0]["role"] == "system":
            return []
        system = self.codec.marker(IM_START) + self.codec.literal("system\n")
        system += self.codec.literal(SMOLLM2_DEFAULT_SYSTEM) + self.codec.marker(IM_END)
        return [Segment(system, None)]
