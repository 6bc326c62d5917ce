"""Tool calls as text: what every renderer's tool format shares (definitions, ids, reading JSON calls).

Each family writes calls its own way (``<tool_call>`` blocks, a bare JSON object, ``Tool call:`` lines);
the pieces here are the common ground: checking tool specs, putting the definitions on the conversation's
system message, reading one call's JSON into a :class:`~envsuite.chat.ToolCall` (or an
:class:`~envsuite.chat.UnparsedToolCall` saying what is wrong), and giving each parsed call an id that is
the same on every machine for the same reply.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envsuite.chat import Message, ToolCall, ToolSpec, UnparsedToolCall, canonical_json

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
"""Names every family can write in its call syntax (OpenAI allows letters, digits, ``_`` and ``-``)."""
MAX_CALL_CHARS = 20_000
"""Longer call text is not read (an unparsed call): bounds the JSON decoder on garbage."""


def check_tool_specs(tools: object) -> list[ToolSpec]:
    """``tools`` as a list of :class:`~envsuite.chat.ToolSpec`, or a ValueError/TypeError naming the bad one."""
    if not isinstance(tools, Sequence) or isinstance(tools, str | bytes):
        raise TypeError(f"tools must be a list of tool specs, got {type(tools).__name__}")
    specs: list[ToolSpec] = []
    for i, spec in enumerate(tools):
        if not isinstance(spec, Mapping):
            raise TypeError(
                f"tool {i} is a {type(spec).__name__}; expected {{name, description, parameters}}"
            )
        name, description, parameters = spec.get("name"), spec.get("description", ""), spec.get("parameters")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ValueError(f"tool {i} has name {name!r}; expected letters, digits, '_', '.' or '-'")
        if not isinstance(description, str):
            raise TypeError(f"tool {name!r} needs a str description")
        if not isinstance(parameters, Mapping):
            raise TypeError(f"tool {name!r} needs JSON-schema parameters (a dict), got {parameters!r}")
        specs.append({"name": name, "description": description, "parameters": dict(parameters)})
    return specs


def tool_json(spec: ToolSpec) -> dict[str, Any]:
    """A spec in OpenAI's tool shape, as chat templates print it: ``{"type": "function", "function": ...}``."""
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["parameters"],
        },
    }


def with_tools(messages: list[Message], tools: Sequence[ToolSpec] | None) -> list[Message]:
    """``messages`` with ``tools`` on the system message at index 0 (added, empty, when there is none).

    This is how ``tools=`` reaches the format: every renderer reads tool definitions from that message.
    No tools (None or empty) leaves the conversation as it is.
    """
    if not tools:
        return messages
    specs = check_tool_specs(tools)
    if messages and messages[0].get("role") == "system":
        first: Message = {**messages[0], "tools": specs}
        return [first, *messages[1:]]
    return [{"role": "system", "content": "", "tools": specs}, *messages]


def tools_of(messages: list[Message]) -> list[ToolSpec]:
    """The tool definitions the conversation carries (on its first message, a system message)."""
    if not messages or messages[0].get("role") != "system":
        return []
    return list(messages[0].get("tools") or [])


def call_id(raw: str, index: int) -> str:
    """A call's id from its text and position: the same on every machine, distinct within a reply."""
    digest = hashlib.blake2b(f"{index}:{raw}".encode("utf-8", "replace"), digest_size=6).hexdigest()
    return f"call_{digest}"


def read_call(
    value: object, raw: str, index: int, arguments_keys: tuple[str, ...] = ("arguments",)
) -> ToolCall | UnparsedToolCall:
    """One decoded call object (``{"name": ..., "arguments": {...}}``) as a call, or why it is not one."""
    if not isinstance(value, Mapping):
        return UnparsedToolCall.create(raw, f"a tool call must be a JSON object, got {type(value).__name__}")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return UnparsedToolCall.create(raw, 'a tool call needs a "name" string')
    key = next((k for k in arguments_keys if k in value), None)
    arguments = {} if key is None else value[key]
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return UnparsedToolCall.create(raw, f'the "{key}" of {name!r} are not a JSON object')
    if not isinstance(arguments, Mapping):
        return UnparsedToolCall.create(raw, f'the "{key}" of {name!r} must be a JSON object')
    return ToolCall.create(name, canonical_json(dict(arguments)), call_id(raw, index))


def decode_json(text: str) -> tuple[object, str | None]:
    """``text`` decoded as JSON, or ``(None, why not)``. Over-long text is refused unread."""
    if len(text) > MAX_CALL_CHARS:
        return None, f"tool call text over {MAX_CALL_CHARS} characters"
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"
    except RecursionError:  # deep nesting ("[[[[...") exhausts the decoder's stack
        return None, "invalid JSON: nested too deeply"


def read_json_call(
    text: str, raw: str, index: int, arguments_keys: tuple[str, ...] = ("arguments",)
) -> ToolCall | UnparsedToolCall:
    """The call written as JSON ``text`` (``raw``: the whole block, kept for an unparsed call)."""
    value, error = decode_json(text.strip())
    if error is not None:
        return UnparsedToolCall.create(raw, error)
    return read_call(value, raw, index, arguments_keys)


@dataclass
class ToolSplit:
    """An assistant reply's text, with its tool calls taken out."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    unparsed: list[UnparsedToolCall] = field(default_factory=list)

    def add(self, call: ToolCall | UnparsedToolCall) -> None:
        if isinstance(call, ToolCall):
            self.calls.append(call)
        else:
            self.unparsed.append(call)

    def message(self, base: Message) -> Message:
        """``base`` (an assistant message) with this split's content and calls."""
        message: Message = {**base, "content": self.content}
        if self.calls:
            message["tool_calls"] = self.calls
        if self.unparsed:
            message["unparsed_tool_calls"] = self.unparsed
        return message


def split_tagged(text: str, open_tag: str, close_tag: str) -> tuple[str, list[tuple[str, str]]] | None:
    """The text before the first ``open_tag`` and every ``(raw block, inside)``; None without a tag.

    An unclosed last block runs to the end of the text (a truncated call: its JSON will not parse).
    """
    start = text.find(open_tag)
    if start < 0:
        return None
    blocks: list[tuple[str, str]] = []
    position = start
    while position >= 0:
        inner_start = position + len(open_tag)
        end = text.find(close_tag, inner_start)
        stop = len(text) if end < 0 else end + len(close_tag)
        blocks.append((text[position:stop], text[inner_start : len(text) if end < 0 else end]))
        position = text.find(open_tag, stop)
    return text[:start], blocks
