"""The checker's tool-call episodes: well-formed and malformed calls to the tools an env declares.

An env declares tools on its conversation's first system message (``tools``). For each tool the
checker sends a call with arguments made from its schema, and then four broken calls: one the renderer
cannot read (bad JSON), one to a tool that does not exist, one with a wrong argument type, one with an
unexpected argument. Every one must be answered by a ``tool`` message the model would see next (or end
the episode with a stop reason), never by an exception; and where the renderer has the extension
property, the next observation must extend the previous one plus the call, so the turn merges into one
datum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envsuite.core import ActionExtra, Env, ToolCall, ToolSpec, as_overflow
from envsuite.renderers import reply_message_tokens
from envsuite.renderers.base import Renderer

_DUMMY: dict[str, Any] = {
    "string": "1",
    "integer": 1,
    "number": 1,
    "boolean": True,
    "array": [],
    "object": {},
}


@dataclass(frozen=True)
class ToolCase:
    """One call to send: what it tests and the call itself."""

    name: str
    call: ToolCall


def declared_tools(env: Env) -> list[ToolSpec]:
    """The tools ``env`` shows the model (after ``initial_observation``)."""
    conversation = env.conversation()
    if not conversation or conversation[0].get("role") != "system":
        return []
    return list(conversation[0].get("tools") or [])


def _value_for(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind is None and isinstance(schema.get("anyOf"), list) and schema["anyOf"]:
        return _value_for(schema["anyOf"][0])
    if schema.get("enum"):
        return schema["enum"][0]
    return _DUMMY.get(str(kind), "1")


def tool_cases(specs: list[ToolSpec]) -> list[ToolCase]:
    """A schema-made call per tool, then the broken calls (see the module docstring)."""
    cases: list[ToolCase] = []
    for spec in specs:
        properties = spec["parameters"].get("properties") or {}
        required = spec["parameters"].get("required") or list(properties)
        arguments = {key: _value_for(properties.get(key) or {}) for key in required}
        cases.append(ToolCase(f"call {spec['name']}", ToolCall.create(spec["name"], arguments, "check_call")))
    first = specs[0]
    properties = first["parameters"].get("properties") or {}
    cases.append(ToolCase("unreadable call", ToolCall.create(first["name"], '{"oops": ', "check_bad")))
    cases.append(ToolCase("unknown tool", ToolCall.create("no_such_tool_here", {}, "check_unknown")))
    if properties:
        key, schema = next(iter(properties.items()))
        wrong = 12345 if schema.get("type") == "string" else "not the right type"
        cases.append(
            ToolCase("wrong argument type", ToolCall.create(first["name"], {key: wrong}, "check_type"))
        )
    cases.append(
        ToolCase("unexpected argument", ToolCall.create(first["name"], {"zz_unexpected": 1}, "check_extra"))
    )
    return cases


async def play_tool_case(make: Callable[[], Env], renderer: Renderer, case: ToolCase) -> str | None:
    """Send ``case``'s call as the first reply; what went wrong, or None."""
    env = make()
    start = await env.initial_observation()
    if as_overflow(start) is not None:
        return f"{case.name}: the prompt overflowed"
    prompt = start[0].to_ints()  # type: ignore[index]
    before = len(env.conversation())
    action = reply_message_tokens(renderer, {"role": "assistant", "content": "", "tool_calls": [case.call]})
    try:
        result = await env.step(action, extra=ActionExtra(stop_reason="stop"))
    except Exception as exc:
        return f"{case.name}: step raised {exc!r}"[:300]
    new = env.conversation()[before:]
    if not any(m.get("role") == "tool" for m in new) and not result.episode_done:
        return f"{case.name}: no tool message answered the call, and the episode went on"
    if result.episode_done or not renderer.has_extension_property:
        return None
    extended = prompt + action
    if result.next_observation.to_ints()[: len(extended)] != extended:
        return f"{case.name}: the next observation does not extend the prompt and the call"
    return None
