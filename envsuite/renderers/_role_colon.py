"""A plain-text format for base models: ``User: ...\\n\\nAssistant: ...\\n\\nUser: ...``.

There are no special tokens. An assistant turn ends with the text ``\\n\\nUser:``, which is both its
stop sequence (a string) and the header of the user turn that follows; so the message after an
assistant message must be a user message, and that user message is rendered without its own header.
Every other message is ``Role: content\\n\\n`` (``System:``, ``User:``, ``Tool:``). Replies are
parsed with the single space after ``Assistant:`` removed.
"""

from __future__ import annotations

from envsuite.chat import Message, Role
from envsuite.renderers._common import Segment, SegmentRenderer

SEPARATOR = "\n\n"
NEXT_HEADER = "User:"


def _label(role: str) -> str:
    return role[:1].upper() + role[1:] + ":"


class RoleColonRenderer(SegmentRenderer):
    """``Role: content`` turns separated by blank lines."""

    name = "role_colon"
    has_extension_property = True
    end_of_turn = SEPARATOR + NEXT_HEADER

    def _end_of_turn_tokens(self) -> list[int]:
        # Two pieces, exactly as the turn after an assistant message is rendered.
        return self.codec.literal(SEPARATOR) + self.codec.literal(NEXT_HEADER)

    def _turn_header(self, messages: list[Message], role: Role, preceded: bool) -> list[int]:
        if messages and messages[-1]["role"] == "assistant":
            if role != "user":
                raise ValueError(
                    f"role_colon: an assistant turn is closed by '{NEXT_HEADER}', so a {role!r} turn "
                    "cannot follow it directly"
                )
            return []
        return self.codec.literal(_label(role))

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        message = messages[index]
        header = self._turn_header(messages[:index], message["role"], preceded)
        body = self.codec.text(" " + message["content"])
        if message["role"] == "assistant":
            return [Segment(header, index), Segment(body + self._end_of_turn_tokens(), index, trainable=True)]
        return [Segment(header, index), Segment(body + self.codec.literal(SEPARATOR), index)]

    def _message_from_text(self, text: str) -> Message:
        return {"role": "assistant", "content": text.removeprefix(" ")}
