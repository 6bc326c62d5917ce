"""Procedural programming tasks: small function specs with hidden tests, at three rungs.

A task is drawn from a seeded RNG: a family (what the function does), its parameters (the constant,
the character, the separator), a name, a docstring, one visible example and hidden test cases (edge
cases plus random inputs). Expected outputs come from the family's own reference implementation here
on the host (trusted code; the model's code runs only in the sandbox).

Rungs: 0, one operation on one number or string (``add_seven(x)``); 1, one operation over a list or
a string (keep, count, replace); 2, two steps or a small algorithm (sum of squares above k, every k-th
element plus c, reversed words in a case). Train and test are disjoint by construction: the split of a task is a hash
of its family and parameters, so no (family, parameters) pair is in both. Names carry their
parameters (``keep_above_4``), none is a HumanEval entry point, and no docstring is a HumanEval
prompt's (``tests/test_code_envs.py`` checks both).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.core import Split
from envsuite.envs._problem import draw_for_split

_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
N_HIDDEN_CASES = 6
RUNGS = (0, 1, 2)


def _word(k: int) -> str:
    return _NUMBER_WORDS[k] if 0 <= k < len(_NUMBER_WORDS) else str(k)


Args = tuple[Any, ...]


@dataclass(frozen=True)
class CodeTask:
    """One task: what the model sees (signature, docstring, example) and the hidden cases."""

    family: str
    rung: int
    params: tuple[Any, ...]
    function: str
    signature: str
    """``def add_seven(x):``"""
    doc: str
    example: tuple[Args, Any]
    cases: tuple[tuple[Args, Any], ...]
    reference: str
    """The family's reference implementation as this task's function (what the tests compare with)."""

    @property
    def key(self) -> str:
        """What decides the split: the family and its parameters (not the name or the inputs)."""
        return f"{self.family}|{self.params!r}"

    def stub(self) -> str:
        """The signature and docstring with the example, as the prompt shows them."""
        args, expected = self.example
        call = f"{self.function}({', '.join(repr(a) for a in args)})"
        return f'{self.signature}\n    """{self.doc}\n\n    >>> {call}\n    {expected!r}\n    """\n'


@dataclass(frozen=True)
class _Family:
    name: str
    rung: int
    params: Callable[[random.Random], tuple[Any, ...]]
    names: Callable[[tuple[Any, ...]], Sequence[str]]
    arg: str
    """The argument's name (and kind): ``x`` or ``n`` an int, ``xs`` a list of ints, ``s`` a string."""
    doc: Callable[[tuple[Any, ...]], str]
    solve: Callable[[tuple[Any, ...], Any], Any]
    body: Callable[[tuple[Any, ...]], str]
    """The reference implementation as the body of the function (the reward probes' reference reply)."""


# --- inputs ---------------------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _inputs(rng: random.Random, arg: str) -> list[Any]:
    """Hidden inputs for an argument kind: edge cases first, then random ones."""
    if arg in ("x", "n"):
        edges: list[Any] = [0, 1, -3] if arg == "x" else [0, 7, 1005]
        return edges + [rng.randint(-50, 99) if arg == "x" else rng.randint(0, 99999) for _ in range(3)]
    if arg == "xs":
        randoms = [[rng.randint(-9, 20) for _ in range(rng.randint(2, 8))] for _ in range(3)]
        return [[], [5], [3, 8, 8, 1], *randoms]
    words = ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(1, 7))) for _ in range(8)]
    sentences = [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(3)]
    return ["", "a", "hello world", *sentences]


def _example(rng: random.Random, arg: str) -> Any:
    if arg == "x":
        return rng.randint(2, 12)
    if arg == "n":
        return rng.randint(10, 999)
    if arg == "xs":
        return [rng.randint(0, 9) for _ in range(4)]
    return rng.choice(["cat", "banana", "code runs", "big red dog"])


# --- the families ---------------------------------------------------------------------------------


def _k(low: int, high: int) -> Callable[[random.Random], tuple[Any, ...]]:
    return lambda rng: (rng.randint(low, high),)


def _cased(word: str, case: str) -> str:
    return word.upper() if case == "upper" else word.lower() if case == "lower" else word


_CASE_CALL = {"upper": ".upper()", "lower": ".lower()", "same": ""}


def _char_pair(rng: random.Random) -> tuple[Any, ...]:
    a, b = rng.sample(_LETTERS, 2)
    return (a, b)


FAMILIES: tuple[_Family, ...] = (
    # rung 0: one operation on one value
    _Family("add", 0, _k(2, 99), lambda p: [f"add_{_word(p[0])}", f"plus_{_word(p[0])}"], "x",
            lambda p: f"Return x plus {p[0]}.", lambda p, x: x + p[0],
            lambda p: f"return x + {p[0]}"),
    _Family("subtract", 0, _k(2, 99), lambda p: [f"subtract_{_word(p[0])}", f"minus_{_word(p[0])}"], "x",
            lambda p: f"Return x minus {p[0]}.", lambda p, x: x - p[0],
            lambda p: f"return x - {p[0]}"),
    _Family("multiply", 0, _k(2, 30), lambda p: [f"times_{_word(p[0])}", f"multiply_by_{_word(p[0])}"], "x",
            lambda p: f"Return x multiplied by {p[0]}.", lambda p, x: x * p[0],
            lambda p: f"return x * {p[0]}"),
    _Family("divisible", 0, _k(2, 30), lambda p: [f"is_divisible_by_{_word(p[0])}"], "x",
            lambda p: f"Return True if x is divisible by {p[0]}, otherwise False.", lambda p, x: x % p[0] == 0,
            lambda p: f"return x % {p[0]} == 0"),
    _Family("repeat", 0, _k(2, 9), lambda p: [f"repeat_{_word(p[0])}_times"], "s",
            lambda p: f"Return the string s repeated {p[0]} times.", lambda p, s: s * p[0],
            lambda p: f"return s * {p[0]}"),
    _Family("prefix", 0, lambda rng: ("".join(rng.sample(_LETTERS, 2)),), lambda p: [f"prefix_{p[0]}"], "s",
            lambda p: f"Return the string s with {p[0]!r} added in front.", lambda p, s: p[0] + s,
            lambda p: f"return {p[0]!r} + s"),
    # rung 1: one operation over a list or a string
    _Family("add_each", 1, _k(2, 50), lambda p: [f"add_{_word(p[0])}_to_each"], "xs",
            lambda p: f"Return a new list with {p[0]} added to every number in xs.",
            lambda p, xs: [x + p[0] for x in xs],
            lambda p: f"return [x + {p[0]} for x in xs]"),
    _Family("keep_above", 1, _k(0, 12), lambda p: [f"keep_above_{p[0]}", f"greater_than_{p[0]}"], "xs",
            lambda p: f"Return the numbers of xs that are greater than {p[0]}, in their order.",
            lambda p, xs: [x for x in xs if x > p[0]],
            lambda p: f"return [x for x in xs if x > {p[0]}]"),
    _Family("count_value", 1, _k(0, 9), lambda p: [f"count_{_word(p[0])}s"], "xs",
            lambda p: f"Return how many times {p[0]} appears in xs.", lambda p, xs: xs.count(p[0]),
            lambda p: f"return xs.count({p[0]})"),
    _Family("first_chars", 1, _k(1, 6), lambda p: [f"first_{_word(p[0])}_chars"], "s",
            lambda p: f"Return the first {p[0]} characters of s (all of s if it is shorter).",
            lambda p, s: s[: p[0]],
            lambda p: f"return s[:{p[0]}]"),
    _Family("count_char", 1, lambda rng: (rng.choice(_LETTERS),), lambda p: [f"count_letter_{p[0]}"], "s",
            lambda p: f"Return how many times the letter {p[0]!r} occurs in s.", lambda p, s: s.count(p[0]),
            lambda p: f"return s.count({p[0]!r})"),
    _Family("replace_char", 1, _char_pair, lambda p: [f"replace_{p[0]}_with_{p[1]}"], "s",
            lambda p: f"Return s with every {p[0]!r} replaced by {p[1]!r}.", lambda p, s: s.replace(p[0], p[1]),
            lambda p: f"return s.replace({p[0]!r}, {p[1]!r})"),
    # rung 2: two steps or a small algorithm
    _Family("sum_squares_above", 2, _k(-20, 40), lambda p: [f"sum_squares_above_{p[0]}".replace("-", "minus_")],
            "xs", lambda p: f"Return the sum of the squares of the numbers in xs that are greater than {p[0]}.",
            lambda p, xs: sum(x * x for x in xs if x > p[0]),
            lambda p: f"return sum(x * x for x in xs if x > {p[0]})"),
    _Family("every_kth_plus", 2, lambda rng: (rng.randint(2, 5), rng.randint(1, 20)),
            lambda p: [f"every_{_word(p[0])}_plus_{_word(p[1])}"], "xs",
            lambda p: f"Return every {p[0]}-th item of xs, starting with the first, each plus {p[1]}.",
            lambda p, xs: [x + p[1] for x in xs[:: p[0]]],
            lambda p: f"return [x + {p[1]} for x in xs[::{p[0]}]]"),
    _Family("scaled_steps", 2, _k(2, 30), lambda p: [f"steps_times_{_word(p[0])}"], "xs",
            lambda p: f"Return the differences between neighbouring numbers of xs (next minus previous), "
            f"each multiplied by {p[0]}.",
            lambda p, xs: [(b - a) * p[0] for a, b in itertools.pairwise(xs)],
            lambda p: f"return [(b - a) * {p[0]} for a, b in zip(xs, xs[1:])]"),
    _Family("digit_sum_times", 2, _k(2, 30), lambda p: [f"digit_sum_times_{_word(p[0])}"], "n",
            lambda p: f"Return the sum of the decimal digits of n (n >= 0), multiplied by {p[0]}.",
            lambda p, n: sum(int(d) for d in str(n)) * p[0],
            lambda p: f"return sum(int(d) for d in str(n)) * {p[0]}"),
    _Family("reverse_words", 2,
            lambda rng: (rng.choice(["-", "+", "/", ", ", " | ", "::", "--", "_", ";", " & ", "~", "**"]),
                         rng.choice(["upper", "lower", "same"])),
            lambda p: [f"reverse_words_{p[1]}"], "s",
            lambda p: "Split s into words at spaces, reverse the order of the words, "
            + {"upper": "make them upper case, ", "lower": "make them lower case, ", "same": ""}[p[1]]
            + f"and join them with {p[0]!r}.",
            lambda p, s: p[0].join(_cased(w, p[1]) for w in reversed(s.split())),
            lambda p: f"return {p[0]!r}.join(w{_CASE_CALL[p[1]]} for w in reversed(s.split()))"),
    _Family("long_words", 2, lambda rng: (rng.randint(1, 5), rng.choice(_LETTERS)),
            lambda p: [f"count_{p[1]}_words_longer_than_{p[0]}"], "s",
            lambda p: f"Return how many words of s (split at spaces) start with {p[1]!r} and have more than "
            f"{p[0]} letters.",
            lambda p, s: sum(len(w) > p[0] and w.startswith(p[1]) for w in s.split()),
            lambda p: f"return sum(len(w) > {p[0]} and w.startswith({p[1]!r}) for w in s.split())"),
)  # fmt: skip
"""Every family; :func:`draw_task` picks among those of one rung."""


def families(rung: int) -> tuple[_Family, ...]:
    if rung not in RUNGS:
        raise ValueError(f"rung must be one of {RUNGS}, got {rung}")
    return tuple(f for f in FAMILIES if f.rung == rung)


def _build(rng: random.Random, family: _Family) -> CodeTask:
    params = family.params(rng)
    name = rng.choice(list(family.names(params)))
    example_arg = _example(rng, family.arg)
    signature = f"def {name}({family.arg}):"
    cases = tuple(((arg,), family.solve(params, arg)) for arg in _inputs(rng, family.arg)[:N_HIDDEN_CASES])
    return CodeTask(
        family=family.name,
        rung=family.rung,
        params=params,
        function=name,
        signature=signature,
        doc=family.doc(params),
        example=((example_arg,), family.solve(params, example_arg)),
        cases=cases,
        reference=f"{signature}\n    {family.body(params)}\n",
    )


def draw_task(rng: random.Random, rung: int, split: Split) -> CodeTask:
    """One task of ``rung`` in ``split`` (families weighted equally)."""
    pool = families(rung)
    return draw_for_split(lambda: _build(rng, rng.choice(pool)), lambda t: t.key, split)
