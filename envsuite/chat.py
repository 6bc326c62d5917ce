"""Chat data shared by the env contracts (``envsuite.core``) and the renderers (``envsuite.renderers``).

It sits below both, so renderers never import the env contracts and the contracts never import a
renderer at run time. ``envsuite.core`` re-exports every name here.

Tool calling lives in the same data: a tool is declared as a :class:`ToolSpec`; a model's request to
call one is a :class:`ToolCall` in the assistant message's ``tool_calls`` (what a renderer parsed out of
the sampled tokens), a call the renderer could not read is an :class:`UnparsedToolCall` in
``unparsed_tool_calls``, and a result comes back as a ``tool`` message carrying ``tool_call_id`` and
``name``. The shapes are OpenAI's chat-completions shapes (and tinker-cookbook 0.5.8's field names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypeAlias, TypedDict

Role: TypeAlias = str
"""Who speaks: usually ``system``, ``user``, ``assistant`` or ``tool``. As in tinker-cookbook, any
other speaker name (``player``, ``answerer``) is allowed and renders under its own name; only
``assistant`` turns are the policy's (trained, and closed by the stop sequence)."""

STANDARD_ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class ToolSpec(TypedDict):
    """A tool as the model is shown it (tinker-cookbook's ``ToolSpec``; OpenAI's ``function`` object)."""

    name: str
    description: str
    parameters: dict[str, Any]
    """A JSON Schema object (``{"type": "object", "properties": {...}, "required": [...]}``)."""


class FunctionCall(dict[str, Any]):
    """The ``function`` part of a tool call: ``{"name": ..., "arguments": "<JSON text>"}``.

    A ``dict`` (so messages stay JSON data and pickle) whose keys also read as attributes
    (``call.function.name``), which is how tinker-cookbook's tool library reads its own pydantic calls.
    """

    @property
    def name(self) -> str:
        return str(self["name"])

    @property
    def arguments(self) -> str:
        """The arguments as JSON text (OpenAI's convention; :meth:`ToolCall.parsed_arguments` decodes)."""
        return str(self["arguments"])


class ToolCall(dict[str, Any]):
    """One call the model asked for: ``{"id": ..., "type": "function", "function": {name, arguments}}``.

    OpenAI's chat-completions shape, as a ``dict`` with attribute access (``call.id``,
    ``call.function.name``, ``call.function.arguments``) so tinker-cookbook's ``handle_tool_call`` and
    ``AgentToolMessageEnv`` take it as they take their own ``ToolCall``. Build one with :meth:`create`.
    """

    @classmethod
    def create(cls, name: str, arguments: str | Mapping[str, Any], id: str | None = None) -> ToolCall:
        """A call of ``name``; ``arguments`` as JSON text or as a mapping (serialized canonically)."""
        text = arguments if isinstance(arguments, str) else canonical_json(dict(arguments))
        return cls(id=id, type="function", function=FunctionCall(name=name, arguments=text))

    @property
    def id(self) -> str | None:
        value = self.get("id")
        return None if value is None else str(value)

    @property
    def type(self) -> str:
        return str(self.get("type", "function"))

    @property
    def function(self) -> FunctionCall:
        return FunctionCall(self["function"])

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments decoded, or None when they are not a JSON object."""
        try:
            value = json.loads(self.function.arguments)
        except (TypeError, ValueError):
            return None
        return value if isinstance(value, dict) else None


class UnparsedToolCall(dict[str, Any]):
    """A tool call the renderer found but could not read (bad JSON, no name): ``{raw_text, error}``.

    tinker-cookbook's ``UnparsedToolCall`` fields, as a ``dict`` with attribute access. Tool-use envs
    answer each with an error message the model sees; they never raise.
    """

    @classmethod
    def create(cls, raw_text: str, error: str) -> UnparsedToolCall:
        return cls(raw_text=raw_text, error=error)

    @property
    def raw_text(self) -> str:
        return str(self["raw_text"])

    @property
    def error(self) -> str:
        return str(self["error"])


class Message(TypedDict):
    """One chat message. ``thinking`` holds reasoning text for renderers that keep it separately.

    Tool fields (all optional): a first ``system`` message's ``tools`` (the definitions the model is
    shown, rendered in its family's format); an ``assistant`` message's ``tool_calls`` and
    ``unparsed_tool_calls``; a ``tool`` message's ``tool_call_id`` (the call it answers) and ``name``
    (the tool that ran).
    ``tool_calls`` may also hold OpenAI-shaped plain dicts or tinker-cookbook's pydantic calls
    (renderers read all three); envsuite's renderers produce :class:`ToolCall`.
    """

    role: Role
    content: str
    thinking: NotRequired[str]
    tools: NotRequired[list[ToolSpec]]
    tool_calls: NotRequired[list[ToolCall]]
    unparsed_tool_calls: NotRequired[list[UnparsedToolCall]]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]


StopCondition: TypeAlias = list[str] | list[int]
"""Where the policy must stop sampling: stop strings or stop token ids (never mixed)."""


def canonical_json(value: object) -> str:
    """JSON as the chat templates write it (``json.dumps`` defaults, non-ASCII kept): ``{"a": 1}``."""
    return json.dumps(value, ensure_ascii=False)


def as_tool_call(call: object) -> ToolCall:
    """Any supported call shape as a :class:`ToolCall`: ours, an OpenAI dict (arguments as JSON text or
    as an object), or an object with ``.function.name`` / ``.function.arguments`` (tinker-cookbook's)."""
    if isinstance(call, ToolCall):
        return call
    if isinstance(call, Mapping):
        function = call.get("function", call)
        name, arguments, call_id = function.get("name"), function.get("arguments", {}), call.get("id")
    else:
        function = getattr(call, "function", call)
        name, arguments = getattr(function, "name", None), getattr(function, "arguments", "{}")
        call_id = getattr(call, "id", None)
    if not isinstance(name, str):
        raise TypeError(f"a tool call needs a function name, got {call!r}")
    if not isinstance(arguments, str | Mapping):
        raise TypeError(f"tool call {name!r}: arguments must be JSON text or a mapping, got {arguments!r}")
    return ToolCall.create(name, arguments, None if call_id is None else str(call_id))


def tool_calls_of(message: Mapping[str, Any]) -> list[ToolCall]:
    """The message's ``tool_calls`` as :class:`ToolCall` s (none: an empty list)."""
    return [as_tool_call(call) for call in message.get("tool_calls") or []]


__all__ = [
    "STANDARD_ROLES",
    "FunctionCall",
    "Message",
    "Role",
    "StopCondition",
    "ToolCall",
    "ToolSpec",
    "UnparsedToolCall",
    "as_tool_call",
    "canonical_json",
    "tool_calls_of",
]
