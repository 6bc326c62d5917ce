"""A plain-text format for base models: ``User: ...\\n\\nAssistant: ...\\n\\nUser: ...``.

There are no special tokens. An assistant turn ends with the text ``\\n\\nUser:``, which is both its
stop sequence (a string) and the header of the user turn that follows; so the message after an
assistant message must be a user (or tool) message, and it is rendered without its own header.
Every other message is ``Role: content\\n\\n`` (``System:``, ``User:``). Replies are parsed with the
single space after ``Assistant:`` removed.

Tools, in plain text: the definitions follow the system message (one JSON object per line), a call is a
line ``Tool call: {"name": ..., "arguments": {...}}`` of the reply, and a result is a user turn
``User: Tool result: ...`` (so it follows a reply exactly as a user turn does).
"""

from __future__ import annotations

import re

from envsuite.chat import Message, Role, canonical_json, tool_calls_of
from envsuite.renderers._chatml import call_json
from envsuite.renderers._common import Segment, SegmentRenderer
from envsuite.renderers._tool_grammar import CallSyntax
from envsuite.renderers._tool_text import ToolSplit, read_json_call, tools_of

SEPARATOR = "\n\n"
NEXT_HEADER = "User:"
CALL_PREFIX = "Tool call: "
RESULT_PREFIX = "Tool result: "
PLAIN_TOOLS_PROMPT = (
    "You can call these tools (one JSON definition per line):\n{definitions}\n"
    'To call a tool, write a line "Tool call: {{"name": TOOL, "arguments": {{...}}}}" and end your reply; '
    'the result comes back as "Tool result: ...". Answer in plain text when you are done.'
)
_CALL_LINE = re.compile(r"^[ \t]*Tool call:", re.MULTILINE)


def _label(role: str) -> str:
    return role[:1].upper() + role[1:] + ":"


def split_plain_calls(text: str) -> ToolSplit:
    """Every ``Tool call: {...}`` line is a call; the text before the first is the content."""
    match = _CALL_LINE.search(text)
    if match is None:
        return ToolSplit(text)
    split = ToolSplit(text[: match.start()].removesuffix("\n"))
    for line in text[match.start() :].splitlines():
        stripped = line.strip()
        if stripped.startswith(CALL_PREFIX.strip()):
            body = stripped[len(CALL_PREFIX.strip()) :]
            split.add(read_json_call(body, stripped, len(split.calls) + len(split.unparsed)))
    return split


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
            if role not in ("user", "tool"):
                raise ValueError(
                    f"role_colon: an assistant turn is closed by '{NEXT_HEADER}', so a {role!r} turn "
                    "cannot follow it directly"
                )
            return []
        return self.codec.literal(_label("user" if role == "tool" else role))

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        message = messages[index]
        header = self._turn_header(messages[:index], message["role"], preceded)
        body = self.codec.text(" " + self._body_text(messages, index))
        if message["role"] == "assistant":
            return [Segment(header, index), Segment(body + self._end_of_turn_tokens(), index, trainable=True)]
        return [Segment(header, index), Segment(body + self.codec.literal(SEPARATOR), index)]

    def _body_text(self, messages: list[Message], index: int) -> str:
        message = messages[index]
        content = message["content"]
        if message["role"] == "tool":
            return RESULT_PREFIX + content
        if index == 0 and message["role"] == "system" and message.get("tools"):
            definitions = "\n".join(canonical_json(dict(spec)) for spec in tools_of(messages))
            return (content + SEPARATOR if content else "") + PLAIN_TOOLS_PROMPT.format(
                definitions=definitions
            )
        calls = tool_calls_of(message)
        if not calls:
            return content
        return "\n".join(([content] if content else []) + [CALL_PREFIX + call_json(call) for call in calls])

    def _split_tool_calls(self, text: str) -> ToolSplit:
        return split_plain_calls(text)

    def tool_call_syntax(self) -> CallSyntax:
        # each call a line "Tool call: {...}" after any content
        return CallSyntax(
            opener=CALL_PREFIX,
            separator="\n" + CALL_PREFIX,
            closer="",
            trigger=CALL_PREFIX.strip(),
            line_start=True,
        )

    def _message_from_text(self, text: str) -> Message:
        text = text.removeprefix(" ")
        return self._split_tool_calls(text).message({"role": "assistant", "content": text})
