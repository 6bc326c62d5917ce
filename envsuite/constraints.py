"""Constraints on sampled text: the shape a sampled sequence must take (the contract of constrained decoding).

A :class:`Constraint` names a formal language, by kind and spec, that every sampled sequence must belong
to: a JSON Schema, a regular expression, one of a list of strings, or an EBNF grammar. It is small,
frozen, hashable and serializable (:meth:`Constraint.to_dict` / :meth:`Constraint.from_dict`), so it
travels in requests, configs and result keys. The sampling engine compiles it once per tokenizer and
applies it as a per-row token mask (``envsuite.engine.sampling``; docs/backend_sampling.md says how, and
what the reported logprobs are under a mask). Nothing here imports a grammar library: a constraint is
checked for well-formed fields when made, and for a valid grammar when compiled (:class:`ConstraintError`).

What a constrained sample guarantees, as :class:`ConstraintOutcome` reports it: a sequence that stopped
(``stop_reason == "stop"``) is a complete document of the language; one cut short by ``max_tokens`` or
the context is marked incomplete, never passed off as complete.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.errors import UsageError

JSON_LAYOUT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How a JSON document under a constraint is laid out: ``json.dumps``' separators, no other whitespace
outside strings (llguidance's JSON options). With free whitespace a weak model spends its budget on it:
every one of 8 ``tiny-random`` samples of a two-field object ran past 50 tokens of blanks, several to 200.
A schema's own ``"x-guidance"`` options override these (``{"whitespace_flexible": true}`` frees it)."""


class ConstraintKind(enum.StrEnum):
    """The language a :class:`Constraint` spec is written in."""

    JSON_SCHEMA = "json_schema"
    """A JSON Schema (as JSON text): the sample is one JSON value valid against it. Keywords a grammar
    cannot enforce (``uniqueItems``, ...) are refused when compiled rather than silently ignored; a schema
    may opt into ignoring them with ``"x-guidance": {"lenient": true}``."""
    REGEX = "regex"
    """A regular expression the whole sample matches (Rust ``regex`` syntax, anchored at both ends)."""
    CHOICE = "choice"
    """One of a list of strings, exactly (the spec is the list as JSON text)."""
    GRAMMAR = "grammar"
    """An EBNF grammar: Lark syntax (llguidance's dialect, whose rules may embed a JSON Schema as
    ``%json { ... }``, e.g. a tool call's arguments inside the model family's call markup) or GBNF
    (llama.cpp's, recognised by its ``::=``); the start rule is ``start`` (Lark) or ``root`` (GBNF)."""


class ConstraintOutcome(enum.StrEnum):
    """Whether a constrained sample is a complete document of its constraint's language."""

    COMPLETE = "complete"
    """The sampled text (less a final stop token) belongs to the language."""
    INCOMPLETE = "incomplete"
    """The sample was cut short (``max_tokens``, the context, or no token could continue it): its text is
    a prefix of a document, not a document. Its ``stop_reason`` is ``"length"``."""


class ConstraintError(UsageError):
    """A constraint that cannot be used: malformed fields, or a spec its compiler refuses (the message
    quotes the compiler's reason)."""


@dataclass(frozen=True)
class Constraint:
    """The language every sampled sequence must belong to; build one with the class methods.

    ``spec`` is text in the kind's language (for ``JSON_SCHEMA`` the schema as compact JSON, keys in their order, for
    ``CHOICE`` the list of strings as JSON), so equal constraints compare and hash equal, and the engine's
    compiled-grammar cache is keyed by the constraint itself.
    """

    kind: ConstraintKind
    spec: str

    def __post_init__(self) -> None:
        try:
            kind = ConstraintKind(self.kind)
        except ValueError:
            known = ", ".join(k.value for k in ConstraintKind)
            raise ConstraintError(f"unknown constraint kind {self.kind!r}; known: {known}") from None
        object.__setattr__(self, "kind", kind)
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ConstraintError(f"a {kind.value} constraint needs a non-empty spec, got {self.spec!r}")
        if kind is ConstraintKind.JSON_SCHEMA:
            _schema_of(self.spec)
        elif kind is ConstraintKind.CHOICE:
            _choices_of(self.spec)

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any] | bool | str) -> Constraint:
        """One JSON value valid against ``schema`` (a dict, ``True``, or its JSON text)."""
        value = _schema_of(schema) if isinstance(schema, str) else schema
        if not isinstance(value, Mapping | bool):
            raise ConstraintError(f"a JSON Schema is an object or a boolean, got {type(value).__name__}")
        return cls(ConstraintKind.JSON_SCHEMA, _canonical(value))

    @classmethod
    def json_object(cls) -> Constraint:
        """Any JSON object (OpenAI's ``response_format: {"type": "json_object"}``)."""
        return cls.json_schema({"type": "object"})

    @classmethod
    def regex(cls, pattern: str) -> Constraint:
        """Text matching ``pattern`` as a whole."""
        return cls(ConstraintKind.REGEX, pattern)

    @classmethod
    def choice(cls, options: Sequence[str]) -> Constraint:
        """Exactly one of ``options`` (in the order given; duplicates are dropped)."""
        if isinstance(options, str):
            raise ConstraintError("choice takes a list of strings, not one string")
        unique = list(dict.fromkeys(options))
        return cls(ConstraintKind.CHOICE, json.dumps(unique, ensure_ascii=False))

    @classmethod
    def grammar(cls, ebnf: str) -> Constraint:
        """Text derived from an EBNF grammar (Lark or GBNF syntax, see :attr:`ConstraintKind.GRAMMAR`)."""
        return cls(ConstraintKind.GRAMMAR, ebnf)

    @property
    def schema(self) -> Mapping[str, Any] | bool:
        """The JSON Schema of a ``JSON_SCHEMA`` constraint."""
        if self.kind is not ConstraintKind.JSON_SCHEMA:
            raise ConstraintError(f"a {self.kind.value} constraint has no JSON Schema")
        return _schema_of(self.spec)

    @property
    def choices(self) -> tuple[str, ...]:
        """The strings of a ``CHOICE`` constraint."""
        if self.kind is not ConstraintKind.CHOICE:
            raise ConstraintError(f"a {self.kind.value} constraint has no choices")
        return _choices_of(self.spec)

    def to_dict(self) -> dict[str, str]:
        """``{"kind": ..., "spec": ...}``: JSON-ready, read back by :meth:`from_dict`."""
        return {"kind": self.kind.value, "spec": self.spec}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Constraint:
        """The constraint :meth:`to_dict` wrote; a clear :class:`ConstraintError` for anything else."""
        if not isinstance(data, Mapping) or set(data) != {"kind", "spec"}:
            raise ConstraintError(f'a constraint is {{"kind": ..., "spec": ...}}, got {data!r}')
        return cls(data["kind"], data["spec"])

    def describe(self) -> str:
        """One line for logs and result keys (the spec cut to 60 characters)."""
        spec = self.spec if len(self.spec) <= 60 else self.spec[:57] + "..."
        return f"{self.kind.value}:{spec}"


def lark_json(schema: Mapping[str, Any] | bool) -> str:
    """``schema`` as a term of a ``GRAMMAR`` constraint's Lark text (``%json {...}``), laid out as
    :data:`JSON_LAYOUT` unless the schema says otherwise; e.g. a tool call in the model family's markup::

        Constraint.grammar(f'start: "<tool_call>" {lark_json(call_schema)} "</tool_call>"')
    """
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    guidance = {**JSON_LAYOUT, **dict(schema.get("x-guidance") or {})}
    return "%json " + _canonical({**schema, "x-guidance": guidance})


def _canonical(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _schema_of(text: str) -> Mapping[str, Any] | bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConstraintError(f"the JSON Schema is not valid JSON: {exc}") from None
    if not isinstance(value, dict | bool):
        raise ConstraintError(f"a JSON Schema is an object or a boolean, got {type(value).__name__}")
    return value


def _choices_of(text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConstraintError(f"a choice spec is a JSON list of strings: {exc}") from None
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s for s in value):
        raise ConstraintError(f"a choice is among a non-empty list of non-empty strings, got {value!r}")
    return tuple(value)
