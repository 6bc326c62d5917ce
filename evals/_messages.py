"""Converting between envsuite chat messages and Inspect's ChatMessage objects, tool calls included.

envsuite keeps tool definitions on the conversation's first system message (``tools``); Inspect keeps
them beside the messages (``ToolInfo`` for a provider, ``Tool`` s for a solver's state). A call is an
envsuite :class:`~envsuite.chat.ToolCall` (arguments as JSON text) on one side and an Inspect
``ToolCall`` (arguments as a dict) on the other; a result is a ``tool`` message on both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolDef, ToolInfo, ToolParams

from envsuite.chat import tool_calls_of
from envsuite.core import Message, ToolCall, ToolSpec


def to_envsuite(messages: Sequence[ChatMessage]) -> list[Message]:
    """Inspect messages as envsuite messages (text content; calls and results kept as tool fields)."""
    converted: list[Message] = []
    for message in messages:
        if isinstance(message, ChatMessageTool):
            text = message.text or (f"Error: {message.error.message}" if message.error else "")
            tool_message: Message = {"role": "tool", "content": text}
            if message.tool_call_id:
                tool_message["tool_call_id"] = message.tool_call_id
            if message.function:
                tool_message["name"] = message.function
            converted.append(tool_message)
            continue
        role = message.role if message.role in ("system", "user", "assistant") else "user"
        item: Message = {"role": role, "content": message.text}
        if isinstance(message, ChatMessageAssistant) and message.tool_calls:
            item["tool_calls"] = [from_inspect_call(call) for call in message.tool_calls]
        converted.append(item)
    return converted


def from_inspect_call(call: InspectToolCall) -> ToolCall:
    """An Inspect call as envsuite's. A call Inspect could not parse keeps arguments that are not JSON,
    so the env's renderer reads it as unparsed and the env answers with an error the model sees."""
    if call.parse_error:
        return ToolCall.create(call.function, '{"unreadable": ' + json.dumps(call.parse_error), call.id)
    return ToolCall.create(call.function, dict(call.arguments), call.id)


def to_inspect_call(call: ToolCall) -> InspectToolCall:
    arguments = call.parsed_arguments()
    if arguments is None:
        return InspectToolCall(
            id=call.id or "",
            function=call.function.name,
            arguments={},
            parse_error="arguments are not a JSON object",
        )
    return InspectToolCall(id=call.id or "", function=call.function.name, arguments=arguments)


def to_inspect(messages: Sequence[Message]) -> list[ChatMessage]:
    """envsuite messages as Inspect messages, for solvers and transcripts (tools: :func:`tools_of`).

    A ``tool`` message that answers no call of the assistant message before it (an env's reply to a
    call it could not read) becomes a user message, since providers accept tool results only for calls.
    """
    converted: list[ChatMessage] = []
    open_calls: set[str] = set()
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "system":
            converted.append(ChatMessageSystem(content=content))
        elif role == "assistant":
            calls = [to_inspect_call(c) for c in tool_calls_of(message)]
            open_calls = {c.id for c in calls}
            converted.append(ChatMessageAssistant(content=content, tool_calls=calls or None))
        elif role == "tool" and message.get("tool_call_id") in open_calls:
            call_id = str(message.get("tool_call_id"))
            converted.append(
                ChatMessageTool(content=content, tool_call_id=call_id, function=message.get("name"))
            )
        elif role == "tool":
            converted.append(ChatMessageUser(content=f"Tool result: {content}"))
        else:
            converted.append(ChatMessageUser(content=content))
    return converted


def tools_of(messages: Sequence[Message]) -> list[ToolSpec]:
    """The tool definitions an envsuite conversation carries (on its first system message)."""
    if not messages or messages[0].get("role") != "system":
        return []
    return list(messages[0].get("tools") or [])


def spec_of(info: ToolInfo) -> ToolSpec:
    """An Inspect tool's description as the renderer takes it."""
    return {
        "name": info.name,
        "description": info.description,
        "parameters": info.parameters.model_dump(exclude_none=True),
    }


def tool_infos(specs: Sequence[ToolSpec]) -> list[ToolInfo]:
    """Specs as Inspect describes tools (what a provider is given)."""
    return [
        ToolInfo(
            name=s["name"],
            description=s["description"],
            parameters=ToolParams.model_validate(s["parameters"]),
        )
        for s in specs
    ]


def as_inspect_sees(messages: Sequence[Message]) -> tuple[list[Message], list[ToolSpec]]:
    """The conversation and tools as a provider receives them through Inspect (messages converted both
    ways, tools through ``ToolInfo``): what the direct bench runner renders, so both runners agree."""
    return to_envsuite(to_inspect(messages)), [spec_of(info) for info in tool_infos(tools_of(messages))]


def inspect_tools(specs: Sequence[ToolSpec]) -> list[Any]:
    """Inspect tools that only describe ``specs``: the env runs its tools, Inspect never calls these."""
    return [_described(spec) for spec in specs]


def _described(spec: ToolSpec) -> Any:
    # One function per tool: Inspect registers a tool's name on its function object.
    async def run_by_the_env(**arguments: Any) -> str:
        raise RuntimeError("envsuite's env runs its own tools; generate with tool_calls='none'")

    parameters = ToolParams.model_validate(spec["parameters"])
    return ToolDef(
        run_by_the_env, name=spec["name"], description=spec["description"], parameters=parameters
    ).as_tool()
