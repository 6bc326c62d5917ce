"""Llama 3: ``<|begin_of_text|>`` then ``<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>``.

Turns follow each other with no separator, so an assistant turn ends at ``<|eot_id|>`` and later
prompts extend earlier ones. Roles are written as given and no default "Cutting Knowledge Date" system
message is added to a conversation without tools. With a tokenizer that lacks Llama's special tokens
(e.g. SmolLM2's), every marker is encoded as plain text and the stop sequence is the string
``<|eot_id|>``.

Tools: Llama 3.1/3.2's JSON tool calling, as their chat templates write it. The system turn opens with
``Environment: ipython`` and the template's date lines (its fixed fallback date), the definitions (one
indented JSON object each) lead the first user message, a call is the JSON object
``{"name": ..., "parameters": {...}}`` as the whole reply (one per line when there are several), and a
result is an ``ipython`` turn whose content is JSON-encoded, as the templates encode it.
"""

from __future__ import annotations

import json
import re

from envsuite.chat import Message, Role, ToolCall, UnparsedToolCall, canonical_json, tool_calls_of
from envsuite.renderers._common import Segment, SegmentRenderer
from envsuite.renderers._tool_grammar import CallSyntax
from envsuite.renderers._tool_text import MAX_CALL_CHARS, ToolSplit, read_call, tool_json, tools_of

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
PYTHON_TAG = "<|python_tag|>"

TOOLS_SYSTEM_LEAD = "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
"""What Llama 3.1/3.2's templates put before the system message when tools are given (with the
templates' fallback date, so renders are reproducible)."""
TOOLS_USER_LEAD = (
    "Given the following functions, please respond with a JSON for a function call with its proper "
    "arguments that best answers the given prompt.\n\n"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)
"""The templates' instructions before the definitions in the first user message."""
_CALL_LINE = re.compile(r'^[ \t]*(?:<\|python_tag\|>)?[ \t]*\{\s*"name"', re.MULTILINE)


def llama_call_json(call: ToolCall) -> str:
    return (
        '{"name": ' + canonical_json(call.function.name) + ', "parameters": ' + call.function.arguments + "}"
    )


def split_llama_calls(text: str) -> ToolSplit:
    """Calls are JSON objects from the first line that opens one (``{"name"``, or after ``<|python_tag|>``)."""
    match = _CALL_LINE.search(text)
    tagged = text.find(PYTHON_TAG)
    starts = [i for i in (match.start() if match else -1, tagged) if i >= 0]
    if not starts:
        return ToolSplit(text)
    start = min(starts)
    split = ToolSplit(text[:start].removesuffix("\n"))
    rest = text[start:].strip().removeprefix(PYTHON_TAG).strip()
    if len(rest) > MAX_CALL_CHARS:
        split.add(UnparsedToolCall.create(rest[:200], f"tool call text over {MAX_CALL_CHARS} characters"))
        return split
    decoder = json.JSONDecoder()
    position = 0
    while position < len(rest):
        try:
            value, end = decoder.raw_decode(rest, position)
        except (ValueError, RecursionError) as exc:  # deep nesting exhausts the decoder's stack
            split.add(UnparsedToolCall.create(rest[position:][:200], f"invalid JSON: {exc}"))
            break
        raw = rest[position:end]
        split.add(read_call(value, raw, len(split.calls) + len(split.unparsed), ("parameters", "arguments")))
        position = end
        while position < len(rest) and rest[position] in " \t\r\n;":
            position += 1
    return split


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
        role = "ipython" if message["role"] == "tool" else message["role"]
        header = Segment(self._turn_header(messages, role, preceded), index)
        body = self.codec.text(self._body_text(messages, index)) + self.codec.marker(EOT)
        return [header, Segment(body, index, trainable=message["role"] == "assistant")]

    def _body_text(self, messages: list[Message], index: int) -> str:
        message = messages[index]
        tools = tools_of(messages)
        if message["role"] == "tool":
            return canonical_json(message["content"])
        if tools and index == 0 and message["role"] == "system":
            return TOOLS_SYSTEM_LEAD + message["content"]
        if tools and index == _first_user(messages):
            definitions = "".join(
                json.dumps(tool_json(s), ensure_ascii=False, indent=4) + "\n\n" for s in tools
            )
            return TOOLS_USER_LEAD + definitions + message["content"]
        calls = tool_calls_of(message)
        if not calls:
            return message["content"]
        lines = [message["content"]] if message["content"] else []
        return "\n".join(lines + [llama_call_json(call) for call in calls])

    def _split_tool_calls(self, text: str) -> ToolSplit:
        return split_llama_calls(text)

    def tool_call_syntax(self) -> CallSyntax:
        # each call a JSON object on a line of its own, after any content
        return CallSyntax(
            opener="",
            separator="\n",
            closer="",
            trigger='{"name"',
            arguments_key="parameters",
            line_start=True,
        )

    def render_segments(self, messages: list[Message]) -> list[Segment]:
        if tools_of(messages) and _first_user(messages) is None:
            raise ValueError(
                "llama3 puts tool definitions in the first user message; this conversation has none"
            )
        return super().render_segments(messages)


def _first_user(messages: list[Message]) -> int | None:
    return next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
