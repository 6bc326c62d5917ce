"""What a chat request asks of its reply's shape: its tools, forced or strict calls, a JSON document, and
the constraint that makes the sampled reply take that shape (constrained decoding, ``envsuite.constraints``).

* ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` / ``function.strict`` (:func:`read_tools`): the
  definitions the prompt shows, and a :class:`~envsuite.renderers.ToolCallRule`. ``"required"`` and a
  named function force a call; a ``strict`` tool's arguments are held to its schema. As in vLLM, a forced
  call holds every offered tool's arguments to its schema, strict or not.
* ``response_format`` (:func:`content_schema`): ``json_object`` (any JSON object) or ``json_schema``
  (a document valid against the schema; ``strict`` or not, it is enforced, as vLLM does).
* ``structured_outputs`` (vLLM's extension, also on ``/completions``): exactly one of ``json``,
  ``regex``, ``choice``, ``grammar``, ``json_object``.

:func:`reply_constraint` combines them into one :class:`~envsuite.constraints.Constraint` (None when the
reply is free): calls are written in the model family's own tool format by its envsuite renderer
(``Renderer.tool_call_constraint``), so the reply is parsed back into ``tool_calls`` exactly as today.
A constraint the grammar compiler refuses is a 400 naming the parameter it came from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envsuite.chat import ToolSpec
from envsuite.constraints import Constraint, ConstraintError
from envsuite.renderers import ToolCallRule, ToolChoice
from envsuite.serve.openai_api._wire import ChatRequest, OpenAIError, unsupported

if TYPE_CHECKING:
    from envsuite.backends.local import LocalSamplingClient
    from envsuite.serve.openai_api._models import ServedModel

_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_STRUCTURED_KINDS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass(frozen=True)
class ToolRequest:
    """The tools a chat request offers and what its reply must do with them."""

    specs: list[ToolSpec] = field(default_factory=list)
    """Shown in the prompt and parsed for in the reply (none with ``tool_choice: "none"``)."""
    rule: ToolCallRule = field(default_factory=ToolCallRule)


@dataclass(frozen=True)
class ReplyConstraint:
    """A reply's constraint and the request parameter it came from (named in a compile error)."""

    constraint: Constraint
    param: str


def read_tools(request: ChatRequest) -> ToolRequest:
    """The request's tools and rule; a 400 naming whatever cannot be honoured."""
    specs = [_tool_spec(tool, f"tools[{i}]") for i, tool in enumerate(request.tools or [])]
    strict = frozenset(
        tool["function"]["name"] for tool in request.tools or [] if tool["function"].get("strict") is True
    )
    parallel = request.parallel_tool_calls is not False
    choice = request.tool_choice
    if choice == "none":
        return ToolRequest()
    if choice in (None, "auto"):
        if choice == "auto" and not specs:
            raise OpenAIError(400, "tool_choice 'auto' needs tools", param="tool_choice")
        return ToolRequest(specs, ToolCallRule(ToolChoice.AUTO, parallel=parallel, strict=strict))
    if not specs:
        raise OpenAIError(400, f"tool_choice {choice!r} needs tools", param="tool_choice")
    if choice == "required":
        return ToolRequest(specs, ToolCallRule(ToolChoice.REQUIRED, parallel=parallel, strict=strict))
    name = _named_function(choice)
    if name not in {spec["name"] for spec in specs}:
        raise OpenAIError(
            400, f"tool_choice names {name!r}, which is not among the tools", param="tool_choice"
        )
    return ToolRequest(specs, ToolCallRule(ToolChoice.FUNCTION, function=name, parallel=False, strict=strict))


def _named_function(choice: object) -> str:
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise OpenAIError(
            400,
            f"tool_choice: expected 'none', 'auto', 'required' or "
            f'{{"type": "function", "function": {{"name": ...}}}}, got {choice!r}',
            param="tool_choice",
        )
    return name


def _tool_spec(tool: dict[str, Any], where: str) -> ToolSpec:
    if tool.get("type") != "function":
        raise unsupported(f"{where}.type", "only function tools are served here")
    for key in sorted(set(tool) - {"type", "function"}):
        raise unsupported(f"{where}.{key}", "not part of a function tool")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise OpenAIError(400, f"{where}.function.name is missing", param=f"{where}.function.name")
    for key in sorted(set(function) - {"name", "description", "parameters", "strict"}):
        raise unsupported(f"{where}.function.{key}", "not part of a function definition")
    if function.get("strict") not in (None, True, False):
        raise OpenAIError(400, f"{where}.function.strict must be a boolean", param=f"{where}.function.strict")
    description = function.get("description") or ""
    parameters = function.get("parameters") or _NO_PARAMETERS
    if not isinstance(description, str) or not isinstance(parameters, dict):
        raise OpenAIError(
            400, f"{where}.function: description must be text, parameters an object", param=where
        )
    return ToolSpec(name=function["name"], description=description, parameters=parameters)


def content_schema(response_format: object) -> Mapping[str, Any] | None:
    """The JSON Schema a reply's content must follow under ``response_format`` (None: free text)."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise OpenAIError(
            400,
            f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
            param="response_format.type",
        )
    assert isinstance(response_format, dict)
    spec = response_format.get("json_schema")
    where = "response_format.json_schema"
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise OpenAIError(400, f"{where} needs a name (and a schema)", param=f"{where}.name")
    for key in sorted(set(spec) - {"name", "schema", "strict", "description"}):
        raise unsupported(f"{where}.{key}", "not part of a json_schema response format")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise OpenAIError(400, f"{where}.schema must be a JSON Schema object", param=f"{where}.schema")
    return schema


def structured_outputs(value: object) -> Constraint | None:
    """vLLM's ``structured_outputs`` as a constraint (None when absent)."""
    if value is None:
        return None
    given = {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else None
    if given is None or len(given) != 1 or next(iter(given)) not in _STRUCTURED_KINDS:
        raise OpenAIError(
            400,
            f"structured_outputs takes exactly one of {', '.join(_STRUCTURED_KINDS)}, got {value!r}",
            param="structured_outputs",
        )
    kind, spec = next(iter(given.items()))
    try:
        if kind == "json":
            return Constraint.json_schema(spec if isinstance(spec, dict | str | bool) else json.dumps(spec))
        if kind == "json_object":
            return Constraint.json_object() if spec is True else None
        if kind == "choice":
            return Constraint.choice(spec)
        return Constraint.regex(spec) if kind == "regex" else Constraint.grammar(spec)
    except (ConstraintError, TypeError) as exc:
        raise OpenAIError(
            400, f"structured_outputs.{kind}: {exc}", param=f"structured_outputs.{kind}"
        ) from None


def reply_constraint(
    request: ChatRequest, tools: ToolRequest, renderer: Any | None
) -> ReplyConstraint | None:
    """The constraint on the reply to ``request`` (None: free). ``renderer`` is the envsuite renderer
    the request renders with (None: the model's chat template, which serves no tools)."""
    schema = content_schema(request.response_format)
    extension = structured_outputs(request.structured_outputs)
    calls = bool(tools.specs) and tools.rule.constrains()
    if extension is not None:
        if schema is not None or calls:
            raise OpenAIError(
                400,
                "structured_outputs cannot be combined with response_format or forced/strict tool calls",
                param="structured_outputs",
            )
        return ReplyConstraint(extension, "structured_outputs")
    if tools.specs and (calls or schema is not None):
        if renderer is None:  # chat_format renders every request with tools with a renderer
            raise OpenAIError(500, "a request with tools rendered without a renderer")
        try:
            constraint = renderer.tool_call_constraint(tools.specs, tools.rule, content_schema=schema)
        except (ValueError, ConstraintError) as exc:
            raise OpenAIError(400, f"tools: {exc}", param="tools") from None
        return ReplyConstraint(constraint, "tools" if schema is None else "response_format")
    if schema is not None:
        try:
            return ReplyConstraint(Constraint.json_schema(schema), "response_format")
        except ConstraintError as exc:
            raise OpenAIError(400, f"response_format: {exc}", param="response_format") from None
    return None


async def compiled(client: LocalSamplingClient, reply: ReplyConstraint | None) -> Constraint | None:
    """``reply``'s constraint, compiled for ``client``'s tokenizer before anything is sampled (cached;
    a long schema takes milliseconds, so off the event loop): a refused one is the request's 400."""
    if reply is None:
        return None
    try:
        await asyncio.to_thread(client.compile_constraint, reply.constraint)
    except ConstraintError as exc:
        raise OpenAIError(400, f"{reply.param}: {exc}", param=reply.param) from None
    return reply.constraint


def refuse_on_vllm(served: ServedModel, reply: ReplyConstraint | None) -> None:
    """A 400 naming what a request sampled on vLLM (``--sampling-engine vllm``) cannot have, as the
    Tinker routes refuse constraints there: envsuite's constraints are not mapped to vLLM's structured
    outputs. Refused rather than sampled on the local engine, so every reply comes from one engine.
    (Top logprobs are served: vLLM returns them by token id.)"""
    if served.vllm is None or reply is None:
        return
    why = "not served when sampling on vLLM (envsuite serve --sampling-engine vllm)"
    raise unsupported(reply.param, f"constrained decoding is {why}")


def completion_constraint(value: object) -> ReplyConstraint | None:
    """``/completions``' constraint: vLLM's ``structured_outputs`` (``response_format`` is chat's)."""
    constraint = structured_outputs(value)
    return None if constraint is None else ReplyConstraint(constraint, "structured_outputs")
