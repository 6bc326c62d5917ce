"""``tools/calculator``: arithmetic beyond the model's head, with a ``calculator`` tool that gets it right.

Each seed draws an integer expression (operand width, operators and number of terms are knobs: the
default is three 5-digit terms with ``+ - *``, the easy rung one product of two 4-digit numbers). The
model may call ``calculator(expression)`` (exact arithmetic, :mod:`~envsuite.envs.tool_use._arith`)
as often as the budget allows, then answers; the answer is read as a number (the last number in the
reply) and must equal the expression's value exactly.

The calculator is a safe evaluator for pure arithmetic. A ``python`` tool that runs code would be one
more :class:`~envsuite.tools.Tool` in :meth:`CalculatorEnv.tools`, run in ``envsuite.sandbox``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Annotated

from envsuite.core import EnvContext, Message, Tool, ToolCall, ToolFailure, tool
from envsuite.envs._problem import draw_for_split
from envsuite.envs.arithmetic import _normalize_operations, draw_expression
from envsuite.envs.tool_use._arith import CalculatorError, evaluate
from envsuite.envs.tool_use._env import DEFAULT_FORMAT_COEF, Score, ToolUseEnv
from envsuite.grading import extract_final_answer, parse_number

TASK = "What is {expression}? Use the calculator tool, then reply with the number only."


@tool
def calculator(expression: Annotated[str, "An arithmetic expression, e.g. '12 * (3 + 4)'"]) -> str:
    """Evaluate an arithmetic expression exactly (numbers, + - * / // % ** and parentheses)."""
    try:
        return evaluate(expression).text
    except CalculatorError as exc:
        raise ToolFailure(str(exc)) from None


class CalculatorEnv(ToolUseEnv):
    """Compute one drawn expression, with a calculator tool (see the module docstring)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        digits: int = 5,
        operations: str | Sequence[str] = ("+", "-", "*"),
        n_terms: int = 3,
        task: str = TASK,
        max_turns: int = 4,
        max_tool_calls: int = 4,
        system_prompt: str | None = None,
        demonstrate: bool = False,
        tool_use_reward: float = 0.0,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``digits`` per operand (1-12), ``operations`` (subset of ``+ - * //``), ``n_terms`` (2-12);
        ``task``: the user's message, a template of ``{expression}``."""
        super().__init__(
            ctx,
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            system_prompt=system_prompt,
            demonstrate=demonstrate,
            tool_use_reward=tool_use_reward,
            format_coef=format_coef,
        )
        if not 1 <= digits <= 12 or not 2 <= n_terms <= 12:
            raise ValueError(f"digits must be in 1..12 and n_terms in 2..12, got {digits}, {n_terms}")
        if "{expression}" not in task:
            raise ValueError("task must contain {expression}")
        ops = _normalize_operations(operations)
        rng = random.Random(ctx.seed)
        expression = draw_for_split(
            lambda: draw_expression(
                rng, digits=digits, operations=ops, n_terms=n_terms, allow_negatives=False
            ),
            lambda e: e.text,
            ctx.split,
        )
        self.expression = expression.text
        self.value = expression.value
        self._task_template = task
        self._task = task.format(expression=expression.text)
        self._tools: list[Tool] = [calculator]

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def demonstration(self) -> list[Message]:
        call = ToolCall.create("calculator", {"expression": "12 * 34"}, "call_example")
        return [
            {"role": "user", "content": self._task_template.format(expression="12 * 34")},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "408", "tool_call_id": "call_example", "name": "calculator"},
        ]

    def task(self) -> str:
        return self._task

    def reference_reply(self) -> str:
        return str(self.value)

    def idle_answer(self) -> str:
        return str(self.value + 1)

    def idle_call(self) -> ToolCall:
        return ToolCall.create("calculator", {"expression": "0"}, "probe_idle")

    async def score(self, answer: str | None) -> Score:
        reference = str(self.value)
        if answer is None:
            return Score(False, reference, "no answer")
        number = parse_number(answer)
        if number is None:
            extracted = extract_final_answer(answer)
            number = parse_number(extracted.text) if extracted is not None else None
        if number is None:
            return Score(False, reference, "no number in the answer")
        return Score(number == self.value, reference, f"read {number}")
