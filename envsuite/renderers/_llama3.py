"""Llama 3: ``<|begin_of_text|>`` then ``<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>``.

Turns follow each other with no separator, so an assistant turn ends at ``<|eot_id|>`` and later
prompts extend earlier ones. Roles are written as given (no ``ipython`` mapping for tools and no
default "Cutting Knowledge Date" system message). With a tokenizer that lacks Llama's special tokens
(e.g. SmolLM2's), every marker is encoded as plain text and the stop sequence is the string
``<|eot_id|>``.
"""

from __future__ import annotations

from envsuite.chat import Message, Role
from envsuite.renderers._common import Segment, SegmentRenderer

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"


class Llama3Renderer(SegmentRenderer):
    """Llama 3 / 3.1 / 3.2 instruct format."""

    name = "llama3"
    has_extension_property = True
    end_of_turn = EOT

    def _prefix(self, messages: list[Message]) -> list[Segment]:
        return [Segment(self.codec.marker(BEGIN_OF_TEXT), None)]

    def _turn_header(self, messages: list[Message], role: Role, preceded: bool) -> list[int]:
        return (
            self.codec.marker(START_HEADER)
            + self.codec.literal(role)
            + self.codec.marker(END_HEADER)
            + self.codec.literal("\n\n")
        )

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        message = messages[index]
        header = Segment(self._turn_header(messages, message["role"], preceded), index)
        body = self.codec.text(message["content"]) + self.codec.marker(EOT)
        return [header, Segment(body, index, trainable=message["role"] == "assistant")]
