"""``arithmetic``: procedural integer arithmetic, graded exactly.

Each seed draws one expression such as ``47 + 12 * 3`` (operand width, operators, number of terms and
negatives are knobs). The reply is read as a plain number and compared exactly. With
``answer_format="number"`` the format is OK when the whole reply is a number; with ``"boxed"`` when it
holds ``\\boxed{...}``. Replies in the other shape still get graded (the last number is used) but lose
the format bonus; see :mod:`envsuite.envs._problem` for the reward.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from envsuite.core import EnvContext
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict, draw_for_split
from envsuite.grading import AnswerSource, GradeOutcome, GradeResult, extract_final_answer, parse_number

OPERATIONS = ("+", "-", "*", "//")
"""The supported operators; ``//`` is integer division rounding down (floor), as in Python."""

AnswerFormat = Literal["number", "boxed"]

_MAX_DIGITS = 12
_MAX_TERMS = 12
_MAX_REDRAWS = 1000


@dataclass(frozen=True)
class Expression:
    """A drawn expression: its text and its exact value."""

    text: str
    value: int


def draw_expression(
    rng: random.Random, *, digits: int, operations: Sequence[str], n_terms: int, allow_negatives: bool
) -> Expression:
    """One random expression. Without ``allow_negatives`` operands and the result are non-negative."""
    for _ in range(_MAX_REDRAWS):
        ops = [rng.choice(list(operations)) for _ in range(n_terms - 1)]
        operands = [_operand(rng, digits, allow_negatives, nonzero=False)]
        operands += [_operand(rng, digits, allow_negatives, nonzero=op == "//") for op in ops]
        value = _evaluate(operands, ops)
        if allow_negatives or value >= 0:
            return Expression(_render(operands, ops), value)
    raise ValueError("could not draw a non-negative expression; allow negatives or use fewer '-' terms")


def _operand(rng: random.Random, digits: int, allow_negatives: bool, *, nonzero: bool) -> int:
    low = max(10 ** (digits - 1) if digits > 1 else 0, 1 if nonzero else 0)
    value = rng.randint(low, 10**digits - 1)
    return -value if allow_negatives and rng.random() < 0.5 else value


def _evaluate(operands: list[int], ops: list[str]) -> int:
    """Value with the usual precedence: ``*`` and ``//`` left to right first, then ``+`` and ``-``."""
    terms = [operands[0]]
    signs = [1]
    for op, operand in zip(ops, operands[1:], strict=True):
        if op == "*":
            terms[-1] *= operand
        elif op == "//":
            terms[-1] //= operand
        else:
            terms.append(operand)
            signs.append(1 if op == "+" else -1)
    return sum(sign * term for sign, term in zip(signs, terms, strict=True))


def _render(operands: list[int], ops: list[str]) -> str:
    parts = [_show(operands[0])]
    for op, operand in zip(ops, operands[1:], strict=True):
        parts += [op, _show(operand)]
    return " ".join(parts)


def _show(value: int) -> str:
    return f"({value})" if value < 0 else str(value)


def _normalize_operations(operations: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(operations, str):
        # "+-*//" and "+,-,*" both work: split out "//" first, then single characters.
        rest = operations.replace(",", " ").replace("//", " // ")
        ops = tuple(t for token in rest.split() for t in ([token] if token == "//" else list(token)))
    else:
        ops = tuple(operations)
    unknown = sorted(set(ops) - set(OPERATIONS))
    if not ops or unknown:
        raise ValueError(f"operations must be a non-empty subset of {OPERATIONS}, got {operations!r}")
    return tuple(dict.fromkeys(ops))


class ArithmeticEnv(ProblemEnv):
    """Compute one procedurally drawn integer expression. Single turn, exact grading."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        digits: int = 2,
        operations: str | Sequence[str] = ("+", "-", "*"),
        n_terms: int = 2,
        allow_negatives: bool = False,
        answer_format: AnswerFormat = "number",
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """Knobs: ``digits`` per operand (1-12), ``operations`` (subset of ``+ - * //``), ``n_terms``
        (2-12), ``allow_negatives``, ``answer_format`` (``"number"`` or ``"boxed"``)."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if not 1 <= digits <= _MAX_DIGITS:
            raise ValueError(f"digits must be in 1..{_MAX_DIGITS}, got {digits}")
        if not 2 <= n_terms <= _MAX_TERMS:
            raise ValueError(f"n_terms must be in 2..{_MAX_TERMS}, got {n_terms}")
        if answer_format not in ("number", "boxed"):
            raise ValueError(f"answer_format must be 'number' or 'boxed', got {answer_format!r}")
        ops = _normalize_operations(operations)
        rng = random.Random(ctx.seed)
        expression = draw_for_split(
            lambda: draw_expression(
                rng, digits=digits, operations=ops, n_terms=n_terms, allow_negatives=allow_negatives
            ),
            lambda e: e.text,
            ctx.split,
        )
        self.answer_format: AnswerFormat = answer_format
        self.value = expression.value
        self.problem = Problem(question=expression.text, answer=str(expression.value))
        self.prompt = self._prompt(expression.text, "//" in expression.text)

    def _prompt(self, expression: str, has_floor_division: bool) -> str:
        note = " (// is integer division, rounding down)" if has_floor_division else ""
        if self.answer_format == "boxed":
            return f"What is {expression}{note}? Give the final answer as \\boxed{{NUMBER}}."
        return f"What is {expression}{note}? Reply with the number only."

    def answer_reply(self, answer: str) -> str:
        return f"\\boxed{{{answer}}}" if self.answer_format == "boxed" else answer

    async def check(self, reply: str) -> Verdict:
        whole = parse_number(reply)
        extracted = extract_final_answer(reply)
        value: Fraction | None
        if self.answer_format == "number" and whole is not None:
            answer, value, format_ok = reply.strip(), whole, True
        elif extracted is not None:
            answer, value = extracted.text, parse_number(extracted.text)
            format_ok = self.answer_format == "boxed" and extracted.source is AnswerSource.BOXED
        else:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no number in the reply"), False, None)
        if value is None:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "not a plain number"), format_ok, answer)
        outcome = GradeOutcome.CORRECT if value == self.value else GradeOutcome.WRONG
        return Verdict(GradeResult(outcome, "exact"), format_ok, answer)
