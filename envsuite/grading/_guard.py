"""Cheap screening of answers before sympy sees them.

sympy evaluates integer powers and factorials eagerly, so ``9^{9^{9^9}}`` or ``99999999!`` can occupy a
worker for minutes (and gigabytes) inside C code no signal interrupts. The worker's hard deadline bounds
that anyway; this screen makes the common pathological shapes fail at once, without costing a worker
restart. It only rejects: an answer it lets through may still time out in the worker.
"""

from __future__ import annotations

import math
import re

MAX_ANSWER_CHARS = 1000
"""Longer answers are rejected unread (real final answers are far shorter)."""

MAX_RESULT_DIGITS = 10_000
"""A numeric power whose value would have more digits than this is rejected."""

MAX_FACTORIAL = 1000
"""``n!`` for a literal ``n`` above this is rejected."""

_POWER_RE = re.compile(r"\^|\*\*")
_FACTORIAL_RE = re.compile(r"(\d+)\s*!")
_NUMERIC_TEXT_RE = re.compile(r"[\d\s.+\-*/^(){}]*")
_BASE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*[)}]?\s*$")


def screen_answer(text: str) -> str | None:
    """Why ``text`` must not reach sympy, or None when it may. Linear in ``len(text)`` (capped)."""
    if len(text) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    for match in _FACTORIAL_RE.finditer(text):
        if len(match.group(1)) > 6 or int(match.group(1)) > MAX_FACTORIAL:
            return f"factorial of a number above {MAX_FACTORIAL}"
    for match in _POWER_RE.finditer(text):
        reason = _screen_power(text, match.start(), match.end())
        if reason is not None:
            return reason
    return None


def _screen_power(text: str, op_start: int, op_end: int) -> str | None:
    exponent, rest = _operand(text, op_end)
    if _POWER_RE.match(rest.lstrip()) and _is_numeric(exponent):
        return "tower of numeric powers"
    if _POWER_RE.search(exponent) and _is_numeric(exponent):
        return "tower of numeric powers"
    try:
        exponent_value = abs(float(exponent.strip().lstrip("+-"))) if _is_numeric(exponent) else None
    except ValueError:
        exponent_value = None
    if exponent_value is None:
        return None
    base = _BASE_RE.search(text[:op_start])
    base_digits = math.log10(float(base.group(1)) + 2) if base else 1.0
    if exponent_value * base_digits > MAX_RESULT_DIGITS:
        return f"power with more than {MAX_RESULT_DIGITS} digits"
    return None


def _operand(text: str, start: int) -> tuple[str, str]:
    """The operand right after a power operator (a braced/parenthesised group or a token) and the rest."""
    i = start
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] in "{(":
        close = {"{": "}", "(": ")"}[text[i]]
        depth = 0
        for j in range(i, len(text)):
            if text[j] == text[i]:
                depth += 1
            elif text[j] == close:
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j], text[j + 1 :]
        return text[i + 1 :], ""
    match = re.match(r"[+-]?[\w.]+", text[i:])
    end = i + (match.end() if match else 0)
    return text[i:end], text[end:]


def _is_numeric(operand: str) -> bool:
    """True when ``operand`` holds only digits and arithmetic (no variables, no commands but products)."""
    bare = operand.replace("\\cdot", "*").replace("\\times", "*")
    return bool(bare.strip()) and _NUMERIC_TEXT_RE.fullmatch(bare) is not None
