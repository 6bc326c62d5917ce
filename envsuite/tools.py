"""Tools: what an env declares for the policy to call, and how one call runs (never raising).

The contract (tinker-cookbook 0.5.8's ``tool_use`` names and shapes, so its ``@tool`` functions and
``Tool`` objects work here unchanged, and envsuite's work in its ``AgentToolMessageEnv``):

* A :class:`Tool` has a ``name``, a ``description``, a JSON-Schema ``parameters_schema`` and an async
  ``run(ToolInput) -> ToolResult``. :func:`tool_spec` turns one into the :class:`~envsuite.chat.ToolSpec`
  a renderer shows the model. A tool is one more entry in an env's list: a calculator, a search, a
  key-value store's methods, and later a sandboxed ``python`` are all the same seam.
* :func:`tool` makes a tool of a plain function (sync or async; parameters from its signature,
  ``Annotated[type, "description"]`` describes one; the description from its docstring). It may return
  a :class:`ToolResult`, a string, or any JSON value (sent as JSON).
* :func:`run_tool_call` runs one parsed call against the env's tools and returns a :class:`ToolOutcome`:
  the ``tool`` messages to show the model, whether a tool asked to stop the episode, and, when the call
  failed, a :class:`ToolError`. A call that cannot be read, names no known tool, has arguments that do
  not fit the schema (missing, unexpected, wrong JSON type), raises, or runs past its time limit gives
  an error message the model sees (``Error: ...``), never an exception.

Tools run in the env's event loop, in the order the model called them; a tool that blocks blocks its
env (the time limit bounds async tools only). Results longer than ``max_chars`` are cut.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, overload, runtime_checkable

from envsuite.chat import Message, ToolCall, ToolSpec, UnparsedToolCall, canonical_json

if TYPE_CHECKING:
    from pydantic import BaseModel

DEFAULT_MAX_RESULT_CHARS = 4000
"""Where a tool's output is cut (a result is observation tokens: it must fit the context)."""


@dataclass
class ToolInput:
    """A call's arguments, decoded, and its id (tinker-cookbook's ``ToolInput``)."""

    arguments: dict[str, Any]
    call_id: str | None = None


@dataclass
class ToolResult:
    """What a tool returns (tinker-cookbook's ``ToolResult``): messages for the model, and a stop flag."""

    messages: list[Message]
    """Usually one ``tool`` message; ``tool_call_id`` and ``name`` are filled in when missing."""
    should_stop: bool = False
    """End the episode after this call (``StopReason.TOOL_STOPPED``)."""
    metrics: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """``metadata["error"]`` marks a failed call (tinker-cookbook's convention)."""


class ToolResultLike(Protocol):
    """Any result with :class:`ToolResult`'s fields (tinker-cookbook's class is one)."""

    messages: Any
    should_stop: bool
    metrics: Any
    metadata: Any


@runtime_checkable
class Tool(Protocol):
    """A callable tool (tinker-cookbook's ``Tool`` protocol; its ``FunctionTool`` satisfies it)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters_schema(self) -> dict[str, Any]: ...

    def run(self, input: ToolInput) -> Awaitable[ToolResultLike]: ...


def tool_spec(tool: Tool) -> ToolSpec:
    """How ``tool`` is shown to the model."""
    return {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters_schema)}


class ToolFailure(Exception):
    """Raise inside a tool to report an error the model reads as ``Error: <message>`` (a failed call)."""


class ToolError(enum.StrEnum):
    """Why a call failed (the model is told in a ``tool`` message; envs count them)."""

    UNPARSED = "unparsed"
    """The renderer could not read the call (bad JSON, no name)."""
    UNKNOWN_TOOL = "unknown_tool"
    BAD_ARGUMENTS = "bad_arguments"
    """Missing, unexpected or wrongly typed arguments (checked against the tool's schema)."""
    TIMEOUT = "timeout"
    FAILED = "failed"
    """The tool raised, or reported an error itself."""


@dataclass(frozen=True)
class ToolOutcome:
    """One call, run: the messages the model sees next, and what happened."""

    messages: list[Message]
    should_stop: bool = False
    error: ToolError | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


def error_message(text: str, call_id: str | None = None, name: str | None = None) -> Message:
    """A ``tool`` message telling the model its call failed."""
    message: Message = {"role": "tool", "content": f"Error: {text}"}
    if call_id:
        message["tool_call_id"] = call_id
    if name:
        message["name"] = name
    return message


async def run_tool_call(
    tools: Mapping[str, Tool] | Sequence[Tool],
    call: ToolCall | UnparsedToolCall,
    *,
    timeout_s: float | None = 30.0,
    max_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> ToolOutcome:
    """Run one parsed call; every failure becomes an error message for the model (see the module doc)."""
    by_name = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
    if isinstance(call, UnparsedToolCall):
        return _failed(ToolError.UNPARSED, f"could not read the tool call: {call.error}")
    name, call_id = call.function.name, call.id
    found = by_name.get(name)
    if found is None:
        known = ", ".join(sorted(by_name)) or "(none)"
        return _failed(
            ToolError.UNKNOWN_TOOL, f"unknown tool {name!r}; the tools are: {known}", call_id, name
        )
    arguments = call.parsed_arguments()
    problems = (
        ["arguments are not a JSON object"]
        if arguments is None
        else argument_errors(found.parameters_schema, arguments)
    )
    if problems or arguments is None:
        return _failed(ToolError.BAD_ARGUMENTS, f"{name}: " + "; ".join(problems), call_id, name)
    try:
        result = await asyncio.wait_for(found.run(ToolInput(arguments, call_id)), timeout_s)
    except TimeoutError:
        return _failed(ToolError.TIMEOUT, f"{name} took longer than {timeout_s} s", call_id, name)
    except ToolFailure as exc:
        return _failed(ToolError.FAILED, str(exc), call_id, name)
    except Exception as exc:  # a tool that raises is the model's error message, never the env's crash
        return _failed(ToolError.FAILED, f"{name} failed: {type(exc).__name__}: {exc}", call_id, name)
    return _outcome(result, call_id, name, max_chars)


def _failed(kind: ToolError, text: str, call_id: str | None = None, name: str | None = None) -> ToolOutcome:
    return ToolOutcome([error_message(text, call_id, name)], error=kind)


def _outcome(result: ToolResultLike, call_id: str | None, name: str, max_chars: int) -> ToolOutcome:
    messages: list[Message] = []
    for raw in list(getattr(result, "messages", None) or []):
        message: Message = {
            "role": str(raw.get("role", "tool")),
            "content": _cut(_text(raw.get("content")), max_chars),
        }
        if raw.get("tool_call_id") or call_id:
            message["tool_call_id"] = str(raw.get("tool_call_id") or call_id)
        message["name"] = str(raw.get("name") or name)
        messages.append(message)
    metadata = getattr(result, "metadata", None) or {}
    metrics = {str(k): float(v) for k, v in (getattr(result, "metrics", None) or {}).items()}
    reported = metadata.get("error") if isinstance(metadata, Mapping) else None
    error = None
    if reported:
        error = (
            ToolError.BAD_ARGUMENTS
            if reported in (ToolError.BAD_ARGUMENTS, "validation_failed")
            else ToolError.FAILED
        )
    return ToolOutcome(
        messages, should_stop=bool(getattr(result, "should_stop", False)), error=error, metrics=metrics
    )


def _text(content: object) -> str:
    """Message content as text (tinker-cookbook tools may return content parts: their text is kept)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p)
    return "" if content is None else str(content)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"... [{len(text) - max_chars} more characters cut]"


# --------------------------------------------------------------------------------------------------
# Arguments against the schema
# --------------------------------------------------------------------------------------------------

_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def argument_errors(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``arguments`` for an object ``schema``: missing required ones, unexpected ones
    (when ``additionalProperties`` is false), and JSON types that differ from the declared ``type``."""
    properties = schema.get("properties") or {}
    problems = [f"missing argument {key!r}" for key in schema.get("required") or [] if key not in arguments]
    for key, value in arguments.items():
        declared = properties.get(key)
        if declared is None:
            if schema.get("additionalProperties") is False:
                problems.append(
                    f"unexpected argument {key!r} (the arguments are: {', '.join(properties) or 'none'})"
                )
            continue
        kinds = declared.get("type") if isinstance(declared, Mapping) else None
        allowed = [kinds] if isinstance(kinds, str) else list(kinds or [])
        checks = [_JSON_TYPES[k] for k in allowed if k in _JSON_TYPES]
        if checks and not any(check(value) for check in checks):
            problems.append(f"argument {key!r} must be {' or '.join(allowed)}, got {_json_type(value)}")
    return problems


def _json_type(value: object) -> str:
    return next(
        (name for name, check in _JSON_TYPES.items() if name != "integer" and check(value)), "unknown"
    )


# --------------------------------------------------------------------------------------------------
# Tools from plain functions
# --------------------------------------------------------------------------------------------------


class FunctionTool:
    """A :class:`Tool` made from a function by :func:`tool` (also a method: it binds like one).

    ``run`` validates the arguments (pydantic, from the signature) and never raises: bad arguments and
    exceptions come back as an error result (``metadata["error"]``), as tinker-cookbook's tools do, so
    it also runs inside tinker-cookbook's ``AgentToolMessageEnv``.
    """

    def __init__(
        self, fn: Callable[..., object], name: str | None = None, description: str | None = None
    ) -> None:
        self._fn = fn
        self._instance: object | None = None
        self._name = name or fn.__name__
        self._description = description if description is not None else (inspect.getdoc(fn) or "")
        self._model = _arguments_model(fn)
        self._schema = _clean_schema(self._model.model_json_schema())

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return self._schema

    def to_spec(self) -> ToolSpec:
        return tool_spec(self)

    async def run(self, input: ToolInput) -> ToolResult:
        from pydantic import ValidationError

        try:
            validated = self._model.model_validate(input.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return _error_result(
                f"{self._name}: {problems}", ToolError.BAD_ARGUMENTS, input.call_id, self._name
            )
        args = () if self._instance is None else (self._instance,)
        try:
            value = self._fn(*args, **{key: getattr(validated, key) for key in type(validated).model_fields})
            if inspect.isawaitable(value):
                value = await value
        except ToolFailure as exc:
            return _error_result(str(exc), ToolError.FAILED, input.call_id, self._name)
        except Exception as exc:
            return _error_result(
                f"{self._name} failed: {type(exc).__name__}: {exc}",
                ToolError.FAILED,
                input.call_id,
                self._name,
            )
        if not isinstance(value, ToolResult):
            value = ToolResult(
                [{"role": "tool", "content": value if isinstance(value, str) else canonical_json(value)}]
            )
        for message in value.messages:  # as tinker-cookbook's tools do: results name their call
            if input.call_id and not message.get("tool_call_id"):
                message["tool_call_id"] = input.call_id
            message.setdefault("name", self._name)
        return value

    def __get__(self, instance: object, owner: type | None = None) -> FunctionTool:
        if instance is None:
            return self
        bound = FunctionTool.__new__(FunctionTool)
        bound.__dict__.update(self.__dict__)
        bound._instance = instance
        return bound

    def __repr__(self) -> str:
        return f"FunctionTool({self._name!r})"


def _error_result(text: str, kind: ToolError, call_id: str | None, name: str) -> ToolResult:
    return ToolResult([error_message(text, call_id, name)], metadata={"error": kind.value})


@overload
def tool(
    fn: Callable[..., object], *, name: str | None = None, description: str | None = None
) -> FunctionTool: ...


@overload
def tool(
    fn: None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., object]], FunctionTool]: ...


def tool(
    fn: Callable[..., object] | None = None, *, name: str | None = None, description: str | None = None
) -> FunctionTool | Callable[[Callable[..., object]], FunctionTool]:
    """Make a :class:`Tool` of a function: ``@tool`` or ``@tool(name=..., description=...)``.

    The parameters' JSON Schema comes from the signature (``int``, ``float``, ``str``, ``bool``,
    ``list[...]``, ``dict``, ``Literal[...]``, defaults; ``Annotated[str, "what it is"]`` describes a
    parameter), the description from the docstring. Unexpected arguments are refused.
    """
    if fn is None:
        return lambda f: FunctionTool(f, name, description)
    return FunctionTool(fn, name, description)


def _arguments_model(fn: Callable[..., object]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (``self`` skipped); pydantic is imported only here."""
    import typing

    from pydantic import ConfigDict, Field, create_model

    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        described = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, str)]
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=described[0] if described else None))
    return create_model(f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema without its generated titles (noise in a prompt)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema
