"""A safe calculator: arithmetic expressions read by walking Python's AST, never ``eval``.

Model output is data: only number literals, ``+ - * / // % **``, unary signs and parentheses are
understood; every other node (names, calls, attributes, strings, comparisons) is refused. Arithmetic is
exact (``fractions.Fraction``), and every value is bounded before it is computed (at most
:data:`MAX_BITS` bits in a numerator or denominator, integer exponents only, small enough that the
power stays under that bound), so an expression takes microseconds however it is written: no thread
or time limit is needed. Results print as integers, or as decimals rounded to 10 places.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 300
MAX_NODES = 200
MAX_BITS = 1024
"""About 308 decimal digits: far beyond any task, small enough that every step is instant."""
_DIGIT_COMMAS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


class CalculatorError(ValueError):
    """The expression cannot be evaluated (the message says why, for the model to read)."""


@dataclass(frozen=True)
class Evaluation:
    value: Fraction
    text: str
    """The value as the calculator prints it."""


def evaluate(expression: str) -> Evaluation:
    """The exact value of ``expression``; raises :class:`CalculatorError` for anything else."""
    source = _normalize(expression)
    if not source:
        raise CalculatorError("empty expression")
    if len(source) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"not an arithmetic expression ({type(exc).__name__})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"expression has more than {MAX_NODES} parts")
    value = _value(tree.body)
    return Evaluation(value, format_value(value))


def format_value(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    rounded = round(value, 10)
    text = f"{rounded.numerator / rounded.denominator:.10f}" if abs(rounded) < 1e15 else str(float(rounded))
    return text.rstrip("0").rstrip(".") if "." in text else text


def _normalize(expression: str) -> str:
    text = expression.strip().rstrip("=").strip()
    text = text.replace("×", "*").replace("÷", "/").replace("^", "**").replace("−", "-")
    return _DIGIT_COMMAS.sub("", text)


def _value(node: ast.expr) -> Fraction:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return _bounded(Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        operand = _value(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _bounded(_BINARY[type(node.op)](_value(node.left), _value(node.right)))
    raise CalculatorError(f"only numbers and + - * / // % ** ( ) are allowed, not {_describe(node)}")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Constant):
        return f"the literal {node.value!r}"[:60]
    return type(node).__name__


def _bounded(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise CalculatorError("a number in the calculation is too large")
    return value


def _divide(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


def _floor_divide(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return Fraction(a // b)


def _modulo(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("modulo by zero")
    return a % b


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError("only whole-number exponents are allowed")
    power = abs(exponent.numerator)
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if power > MAX_BITS or size * power > MAX_BITS:
        raise CalculatorError("the power is too large")
    if base == 0 and exponent < 0:
        raise CalculatorError("zero to a negative power")
    return base**exponent.numerator


_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}
