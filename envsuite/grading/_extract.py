"""Finding the final answer in a model reply, and reading plain numbers exactly.

Everything here is pure string work on bounded input (linear scans and anchored regexes), so it is safe to
run on any reply, however long or strange, in any thread.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from fractions import Fraction

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")

_MAX_NUMBER_DIGITS = 60
"""Longer digit strings are not "plain numbers"; they go through the guarded math-verify path."""

# A number as people write it: optional sign, digits with optional thousands separators, optional decimals.
_NUMBER = r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+−]?\.\d+"
_NUMBER_RE = re.compile(rf"^(?:{_NUMBER})$")
_FRACTION_RE = re.compile(r"^(?P<sign>[-+]?)(?P<num>\d+)\s*/\s*(?P<den>\d+)$")
_LATEX_FRAC_RE = re.compile(r"^(?P<sign>[-+]?)\\[dt]?frac\s*\{\s*(?P<num>\d+)\s*\}\s*\{\s*(?P<den>\d+)\s*\}$")
_LATEX_FRAC_SHORT_RE = re.compile(r"^(?P<sign>[-+]?)\\[dt]?frac(?P<num>\d)(?P<den>\d)$")
_LAST_NUMBER_RE = re.compile(r"[-−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?")

# Decorations that do not change a number's value: math delimiters, currency, spacing macros.
_STRIP_WRAPPERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("{", "}"))
_NOISE_RE = re.compile(r"\\[,;:! ]|\\text\{\s*\}|\\left|\\right")


class AnswerSource(enum.StrEnum):
    """Where :func:`extract_final_answer` found the answer."""

    BOXED = "boxed"
    """The content of the last non-empty ``\\boxed{...}`` (the requested format)."""
    LAST_NUMBER = "last_number"
    """No box: the last number in the reply (a format-less reply)."""


@dataclass(frozen=True)
class ExtractedAnswer:
    """The final answer of a reply and where it came from."""

    text: str
    source: AnswerSource


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None.

    Unclosed boxes (a truncated reply) are ignored. The content is returned stripped; it may be empty.
    """
    spans = _boxed_spans(text)
    return text[slice(*spans[-1])].strip() if spans else None


def _boxed_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every closed box's content, ordered by where each box starts. Linear in ``text``."""
    box_opens = {match.end() for match in _BOX_RE.finditer(text)}
    if not box_opens:
        return []
    found: list[tuple[int, int]] = []
    stack: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # an escaped brace (\{ or \}) neither opens nor closes a group
            continue
        if char == "{":
            stack.append(i + 1)
        elif char == "}" and stack:
            start = stack.pop()
            if start in box_opens:
                found.append((start, i))
        i += 1
    return sorted(found)


def extract_final_answer(text: str) -> ExtractedAnswer | None:
    """The last non-empty boxed answer, else the last number in ``text``, else None."""
    boxed = _last_nonempty_boxed(text)
    if boxed is not None:
        return ExtractedAnswer(boxed, AnswerSource.BOXED)
    last: str | None = None
    for match in _LAST_NUMBER_RE.finditer(text):
        last = match.group(0)
    if last is None:
        return None
    return ExtractedAnswer(last.replace("−", "-"), AnswerSource.LAST_NUMBER)


def _last_nonempty_boxed(text: str) -> str | None:
    for span in reversed(_boxed_spans(text)):
        content = text[slice(*span)].strip()
        if content:
            return content
    return None


def parse_number(text: str) -> Fraction | None:
    """The exact value of a plain number, or None if ``text`` is anything else.

    Plain numbers are integers and decimals (optionally with ``,`` thousands separators, a sign, math
    delimiters or a currency sign), simple fractions ``a/b`` and ``\\frac{a}{b}``. Nothing is evaluated:
    expressions, units and scientific notation return None.
    """
    cleaned = _clean_number_text(text)
    if cleaned is None:
        return None
    if _NUMBER_RE.match(cleaned):
        if sum(c.isdigit() for c in cleaned) > _MAX_NUMBER_DIGITS:
            return None
        return Fraction(cleaned.replace(",", "").replace("−", "-"))
    for pattern in (_FRACTION_RE, _LATEX_FRAC_RE, _LATEX_FRAC_SHORT_RE):
        match = pattern.match(cleaned)
        if match:
            num, den = match.group("num"), match.group("den")
            if len(num) + len(den) > _MAX_NUMBER_DIGITS or int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
            return -value if match.group("sign") == "-" else value
    return None


def _clean_number_text(text: str) -> str | None:
    if len(text) > 4 * _MAX_NUMBER_DIGITS:
        return None
    cleaned = _NOISE_RE.sub("", text.strip()).replace("{,}", ",")
    changed = True
    while changed and cleaned:
        changed = False
        for left, right in _STRIP_WRAPPERS:
            if cleaned.startswith(left) and cleaned.endswith(right) and len(cleaned) >= len(left + right):
                cleaned = cleaned[len(left) : len(cleaned) - len(right)].strip()
                changed = True
        for prefix in ("\\$", "$"):
            if cleaned.startswith(prefix) or cleaned.startswith("-" + prefix):
                cleaned = cleaned.replace(prefix, "", 1).strip()
                changed = True
        if cleaned.endswith(".") and not cleaned.endswith(".."):
            cleaned = cleaned[:-1].strip()
            changed = True
    return cleaned or None
