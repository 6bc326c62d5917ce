"""Tool calls as a grammar: the replies a family's tool format allows, for constrained decoding.

Each renderer writes calls its own way (:class:`CallSyntax` says how, in the pieces a grammar needs), and
:func:`tool_call_grammar` turns that, the request's tools and its :class:`ToolCallRule` into a Lark
grammar (llguidance's dialect, see ``envsuite.constraints.ConstraintKind.GRAMMAR``) whose every document
parses back into the calls it spells: the same text the renderer writes for those calls, so sampling
under it and parsing with ``parse_response`` agree.

What the rule asks for, as OpenAI's ``tool_choice`` means it:

* ``AUTO``: free text that never opens a call, or (optionally after such text) one or more calls;
  the arguments of ``strict`` tools are held to their schema, the others are any JSON object.
  With a ``content_schema`` (``response_format``), the text alternative is a JSON document instead.
* ``REQUIRED``: the reply is one or more calls, nothing else (no text before them: a weak model would
  otherwise ramble until ``max_tokens`` and never call); every tool's arguments follow its schema.
* ``FUNCTION``: the reply is exactly one call of the named function, arguments per its schema.

A call is written ``{"name": NAME, KEY: ARGUMENTS}`` (``KEY`` is ``arguments``, or Llama's ``parameters``)
with ``json.dumps``' separators, as :func:`~envsuite.renderers._chatml.call_json` writes it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envsuite.chat import ToolSpec
from envsuite.constraints import lark_json

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""The arguments of a tool that is not held to its schema."""


class ToolChoice(enum.StrEnum):
    """Whether the reply may, must, or must call exactly one named function."""

    AUTO = "auto"
    REQUIRED = "required"
    FUNCTION = "function"


@dataclass(frozen=True)
class ToolCallRule:
    """What a reply with tools must look like (OpenAI's ``tool_choice``, ``parallel_tool_calls``, ``strict``)."""

    choice: ToolChoice = ToolChoice.AUTO
    function: str | None = None
    """The one function a ``FUNCTION`` choice calls."""
    parallel: bool = True
    """Whether a reply may hold several calls (``FUNCTION`` always makes one)."""
    strict: frozenset[str] = field(default_factory=frozenset)
    """Tools whose arguments follow their schema under ``AUTO`` (forced choices hold every tool to it)."""

    def __post_init__(self) -> None:
        if (self.choice is ToolChoice.FUNCTION) != (self.function is not None):
            raise ValueError("a FUNCTION tool choice names its function, and only it does")

    def constrains(self, content_schema: object = None) -> bool:
        """Whether replies need a grammar at all: a forced call, a strict tool, or a content schema."""
        return self.choice is not ToolChoice.AUTO or bool(self.strict) or content_schema is not None


@dataclass(frozen=True)
class CallSyntax:
    """How a family writes the calls of one reply (every piece is literal text)."""

    opener: str
    """Before the first call: ``"<tool_call>\\n"`` (Hermes), ``"<tool_call>["`` (SmolLM2), ``""`` (Llama)."""
    separator: str
    """Between two calls: the end of one block and the start of the next, or a list's ``", "``."""
    closer: str
    """After the last call."""
    trigger: str
    """The text where the parser starts reading calls: free text before a call never contains it."""
    arguments_key: str = "arguments"
    line_start: bool = False
    """The parser finds calls only at the start of a line: text before a call ends with a newline."""
    specials: tuple[tuple[str, int], ...] = ()
    """Markers in the pieces that this tokenizer has as single special tokens (Qwen's ``<tool_call>``),
    with their ids: the grammar names the token, since no text spells a special token."""

    def pieces(self, text: str) -> str:
        """``text`` as a sequence of Lark terms: string literals, and ``<[id]>`` for special markers."""
        terms: list[str] = []
        rest = text
        while rest:
            hits = [(rest.find(m), m, i) for m, i in self.specials if m in rest]
            if not hits:
                terms.append(_lit(rest))
                break
            at, marker, token = min(hits)
            if at:
                terms.append(_lit(rest[:at]))
            terms.append(f"<[{token}]>")
            rest = rest[at + len(marker) :]
        return " ".join(terms)


def tool_call_grammar(
    syntax: CallSyntax,
    tools: Sequence[ToolSpec],
    rule: ToolCallRule,
    content_schema: Mapping[str, Any] | None = None,
    terminator: str = "",
) -> str:
    """The Lark grammar of every reply ``rule`` allows over ``tools`` written in ``syntax``.

    ``terminator``: text that ends the turn where the format's stop is text, not a token (Llama's
    ``<|eot_id|>`` with a tokenizer that lacks it): written after the calls or the content document, so
    the grammar, and with it the sample, ends there rather than running on to ``max_tokens``."""
    names = [tool["name"] for tool in tools]
    if rule.choice is ToolChoice.FUNCTION and rule.function not in names:
        raise ValueError(f"tool_choice names {rule.function!r}, which is not among the tools {names}")
    if not tools:
        raise ValueError("a tool call grammar needs at least one tool")
    called = [t for t in tools if rule.choice is not ToolChoice.FUNCTION or t["name"] == rule.function]
    forced = rule.choice is not ToolChoice.AUTO
    bodies = [_call_body(t, syntax.arguments_key, forced or t["name"] in rule.strict) for t in called]
    name_key = '{"name": '
    # Pieces without special tokens are terminals (one lexeme each); with them, rules of terms.
    special = bool(syntax.specials)
    head, next_, end = ("head", "next", "end") if special else ("HEAD", "NEXT", "END")
    many = f" ({next_} call_body)*" if rule.parallel and rule.choice is not ToolChoice.FUNCTION else ""
    calls = f"{head} call_body{many} {end}"
    opening = syntax.pieces(syntax.opener + name_key)
    lines = [
        "call_body: " + "\n    | ".join(bodies),
        f"{next_}: {syntax.pieces('}' + syntax.separator + name_key)}",
        f"{end}: {syntax.pieces('}' + syntax.closer + terminator)}",
    ]
    if forced:
        return _lines(f"start: {calls}", f"{head}: {opening}", *lines)
    if content_schema is not None:
        ending = f" {_lit(terminator)}" if terminator else ""
        content = f"content: {lark_json(content_schema)}{ending}"
        return _lines(f"start: content | {calls}", content, f"{head}: {opening}", *lines)
    return _lines(f"start: TEXT | {calls}", *_free_text(syntax, opening), *lines)


def _free_text(syntax: CallSyntax, opening: str) -> list[str]:
    """Rules for free text that may run into a call's opening. Without special tokens the text and the
    opening are one lexeme, so the lexer never guesses where text ends (a separate opener literal would
    be swallowed by the text); a special token ends the text by itself, since no text spells it."""
    free = f"/(.|\\n)*/ & ~/(.|\\n)*{_regex_escape(syntax.trigger)}(.|\\n)*/"
    rules = ["TEXT: FREE", f"FREE: {free}"]
    if syntax.specials:
        before = "FREE_NL?" if syntax.line_start else "FREE?"
        return [*rules, f"head: {before} {opening}", 'FREE_NL: FREE "\\n"']
    before = '(FREE "\\n")?' if syntax.line_start else "FREE"
    return [*rules, f"HEAD: {before} {opening}"]


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def _call_body(tool: ToolSpec, arguments_key: str, strict: bool) -> str:
    schema = dict(tool["parameters"]) if strict else ANY_OBJECT
    lead = json.dumps(tool["name"], ensure_ascii=False) + f", {json.dumps(arguments_key)}: "
    return f"{_lit(lead)} {lark_json(schema)}"


def _lit(text: str) -> str:
    """``text`` as a Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text, ensure_ascii=False)


_REGEX_SPECIAL = set("\\.+*?()|[]{}^$/&~-")


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_SPECIAL else ("\\n" if c == "\n" else c) for c in text)
