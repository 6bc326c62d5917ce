"""The code-checked criteria of the judged instruction items: ``(prompt, reply) -> 0.0 or 1.0`` by name.

A rubric names a function criterion by import string; these are named ``CHECKS_MODULE:<check>`` or,
for the checks that take a number, ``CHECKS_MODULE:<check>_<n>`` (``words_at_most_50``): the module
resolves any such name (:func:`check_function`), so an item's rubric stays plain data. The guards
(:data:`GUARDS`) are in every item's rubric with weight 0 and gate all its other criteria: an empty
reply, a copy of the prompt or a reply that talks to the judge earns nothing, whatever the rest says.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

CHECKS_MODULE = "envsuite.envs.judged.checks"

CheckFunction = Callable[[str, str], float]

_WORD = re.compile(r"[\w'’-]+")
_BULLET = re.compile(r"^\s*[-*•]\s+\S")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_COPY_SHARE = 0.5
"""A reply whose word trigrams come from the prompt this much or more is a copy of it."""
MIN_WORDS = 3
"""The fewest words a substantive reply has."""


class Check(enum.Enum):
    """What a code criterion checks; the ones marked *n* take a number."""

    WORDS_AT_MOST = "words_at_most"  # n
    WORDS_AT_LEAST = "words_at_least"  # n
    LINES = "lines"  # n: exactly n non-empty lines
    BULLETS = "bullets"  # n: exactly n lines starting "- " or "* "
    NUMBERED = "numbered"  # n: exactly n lines starting "1." (or "1)")
    PARAGRAPHS = "paragraphs"  # n: exactly n blocks separated by blank lines
    SENTENCES_AT_MOST = "sentences_at_most"  # n
    LOWERCASE = "lowercase"
    UPPERCASE = "uppercase"
    NO_COMMAS = "no_commas"
    JSON_OBJECT = "json_object"
    ENDS_WITH_QUESTION = "ends_with_question"
    TITLE = "title"
    """A title in double angle brackets, ``<<like this>>``."""
    SUBSTANTIVE = "substantive"
    """A guard: at least :data:`MIN_WORDS` words."""
    OWN_WORDS = "own_words"
    """A guard: not a copy of the prompt (under half of its word trigrams come from the prompt)."""


TAKES_NUMBER = frozenset(
    {
        Check.WORDS_AT_MOST,
        Check.WORDS_AT_LEAST,
        Check.LINES,
        Check.BULLETS,
        Check.NUMBERED,
        Check.PARAGRAPHS,
        Check.SENTENCES_AT_MOST,
    }
)
GUARDS = (Check.SUBSTANTIVE, Check.OWN_WORDS)


@dataclass(frozen=True)
class CheckSpec:
    """One check with its number (None for the checks that take none)."""

    check: Check
    n: int | None = None

    @property
    def name(self) -> str:
        """The function's name in this module (``words_at_most_50``)."""
        return self.check.value if self.n is None else f"{self.check.value}_{self.n}"

    @property
    def target(self) -> str:
        """The function criterion's import string."""
        return f"{CHECKS_MODULE}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> CheckSpec:
        """``"words_at_most:50"`` or ``"words_at_most_50"`` or ``"lowercase"``; anything else raises."""
        name, sep, number = text.replace(":", "_").rpartition("_")
        if sep and number.isdigit() and name in {c.value for c in TAKES_NUMBER}:
            return cls(Check(name), int(number))
        check = Check(text)
        if check in TAKES_NUMBER:
            raise ValueError(f"check {text!r} needs a number ({text}:N)")
        return cls(check)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def _lines(reply: str) -> list[str]:
    return [line for line in reply.splitlines() if line.strip()]


def _paragraphs(reply: str) -> int:
    return len([block for block in re.split(r"\n\s*\n", reply.strip()) if block.strip()])


def _sentences(reply: str) -> int:
    text = reply.strip()
    return len(_SENTENCE_END.findall(text)) + (1 if text and text[-1] not in ".!?" else 0)


def _is_json_object(reply: str) -> bool:
    text = reply.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def own_words(prompt: str, reply: str) -> bool:
    """Whether ``reply`` is more than a copy of ``prompt`` (its word trigrams mostly its own)."""
    said = [w.lower() for w in words(reply)]
    asked = [w.lower() for w in words(prompt)]
    grams = [tuple(said[i : i + 3]) for i in range(len(said) - 2)]
    if not grams:
        return " ".join(said) not in " ".join(asked) or not said
    given = {tuple(asked[i : i + 3]) for i in range(len(asked) - 2)}
    return sum(g in given for g in grams) / len(grams) < _COPY_SHARE


def passes(spec: CheckSpec, prompt: str, reply: str) -> bool:
    """Whether ``reply`` passes ``spec``."""
    n = spec.n or 0
    checks: dict[Check, Callable[[], bool]] = {
        Check.WORDS_AT_MOST: lambda: len(words(reply)) <= n,
        Check.WORDS_AT_LEAST: lambda: len(words(reply)) >= n,
        Check.LINES: lambda: len(_lines(reply)) == n,
        Check.BULLETS: lambda: sum(bool(_BULLET.match(line)) for line in _lines(reply)) == n,
        Check.NUMBERED: lambda: sum(bool(_NUMBERED.match(line)) for line in _lines(reply)) == n,
        Check.PARAGRAPHS: lambda: _paragraphs(reply) == n,
        Check.SENTENCES_AT_MOST: lambda: _sentences(reply) <= n,
        Check.LOWERCASE: lambda: reply == reply.lower() and any(c.isalpha() for c in reply),
        Check.UPPERCASE: lambda: reply == reply.upper() and any(c.isalpha() for c in reply),
        Check.NO_COMMAS: lambda: "," not in reply,
        Check.JSON_OBJECT: lambda: _is_json_object(reply),
        Check.ENDS_WITH_QUESTION: lambda: reply.rstrip().endswith("?"),
        Check.TITLE: lambda: re.search(r"<<[^<>\n]+>>", reply) is not None,
        Check.SUBSTANTIVE: lambda: len(words(reply)) >= MIN_WORDS,
        Check.OWN_WORDS: lambda: own_words(prompt, reply),
    }
    return checks[spec.check]()


def check_function(name: str) -> CheckFunction:
    """The criterion function called ``name`` in this module (``words_at_most_50``)."""
    spec = CheckSpec.parse(name)

    def check(prompt: str, reply: str) -> float:
        return float(passes(spec, prompt, reply))

    check.__name__ = spec.name
    return check


def __getattr__(name: str) -> CheckFunction:
    """Any check by name, for ``FunctionCriterion(function=f"{CHECKS_MODULE}:{name}")`` (PEP 562)."""
    try:
        return check_function(name)
    except ValueError as err:
        raise AttributeError(f"{CHECKS_MODULE} has no check {name!r}: {err}") from err
