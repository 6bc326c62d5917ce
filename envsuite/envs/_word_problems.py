"""Procedural multi-step word problems with clean answers (the offline default of ``math``).

Each template draws its numbers from the caller's RNG so that the answer is exact and short: an
integer, a terminating decimal, or a fraction written ``\\frac{a}{b}``. Twelve templates cover
shopping and change, travel time, work rates, ratios, percentages, fractions of quantities, ages,
areas, unit conversions, averages, fractions of a whole and recipe scaling.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from math import gcd

from envsuite.envs._problem import Problem

_PEOPLE = (
    ("Ava", "she"),
    ("Liam", "he"),
    ("Maya", "she"),
    ("Noah", "he"),
    ("Zara", "she"),
    ("Omar", "he"),
    ("Lena", "she"),
    ("Kenji", "he"),
    ("Priya", "she"),
    ("Mateo", "he"),
)
_ITEMS = (
    ("notebooks", "pens"),
    ("apples", "pears"),
    ("mugs", "plates"),
    ("socks", "hats"),
    ("cards", "stamps"),
)
_COUNTABLES = ("stickers", "marbles", "coins", "seashells", "stamps", "beads")


def format_answer(value: Fraction, *, prefer_fraction: bool = False) -> str:
    """An integer, a decimal when the value terminates in at most 4 places, else ``\\frac{a}{b}``."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den == 1 and not prefer_fraction:
        for places in range(1, 5):
            scaled = value * 10**places
            if scaled.denominator == 1:
                return f"{value.numerator / value.denominator:.{places}f}"
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _frac(numerator: int, denominator: int) -> str:
    value = Fraction(numerator, denominator)
    return f"{value.numerator}/{value.denominator}"


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(_PEOPLE)


def _shopping(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    first, second = rng.choice(_ITEMS)
    q1, q2 = rng.randint(2, 6), rng.randint(2, 6)
    p1, p2 = 5 * rng.randint(10, 99), 5 * rng.randint(10, 99)
    total = q1 * p1 + q2 * p2
    bill = next(b for b in (1000, 2000, 5000, 10000, 20000) if b > total)
    question = (
        f"{name} buys {q1} {first} at ${_money(p1)} each and {q2} {second} at ${_money(p2)} each. "
        f"{pronoun.capitalize()} pays with a ${bill // 100} bill. How many dollars of change does "
        f"{pronoun} get back?"
    )
    return Problem(question, format_answer(Fraction(bill - total, 100)))


def _travel(rng: random.Random) -> Problem:
    name, _ = _person(rng)
    v1, v2 = rng.sample((32, 40, 48, 60, 64, 72, 80), 2)
    t1, t2 = Fraction(rng.randint(2, 12), 4), Fraction(rng.randint(2, 12), 4)
    d1, d2 = v1 * t1, v2 * t2
    question = (
        f"{name} drives {d1} km at {v1} km/h and then another {d2} km at {v2} km/h. "
        "How many hours does the whole trip take?"
    )
    return Problem(question, format_answer(t1 + t2))


def _work_rate(rng: random.Random) -> Problem:
    a, b = sorted(rng.sample(range(2, 13), 2))
    question = (
        f"One pipe fills a tank in {a} hours and a second pipe fills the same tank in {b} hours. "
        "If both pipes are opened together, how many hours does it take to fill the tank?"
    )
    return Problem(question, format_answer(Fraction(a * b, a + b)))


def _ratio(rng: random.Random) -> Problem:
    red, blue = rng.choice([(r, b) for r in range(1, 10) for b in range(1, 10) if r != b and gcd(r, b) == 1])
    k, added = rng.randint(2, 12), rng.randint(1, 20)
    question = (
        f"In a bag the ratio of red marbles to blue marbles is {red}:{blue}, and there are "
        f"{(red + blue) * k} marbles in total. Then {added} more blue marbles are added. "
        "How many blue marbles are in the bag now?"
    )
    return Problem(question, str(blue * k + added))


def _percent(rng: random.Random) -> Problem:
    price, discount, tax = 20 * rng.randint(2, 25), 5 * rng.randint(1, 12), rng.choice((5, 8, 10, 15))
    final = Fraction(price) * Fraction(100 - discount, 100) * Fraction(100 + tax, 100)
    question = (
        f"A jacket costs ${price}. It is discounted by {discount}%, and then a sales tax of {tax}% is "
        "added to the discounted price. What is the final price in dollars?"
    )
    return Problem(question, format_answer(final))


def _fraction_of_quantity(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    thing = rng.choice(_COUNTABLES)
    b, d = rng.randint(2, 6), rng.randint(2, 6)
    a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
    total = b * d * rng.randint(1, 8)
    left = Fraction(total) * (1 - Fraction(a, b)) * (1 - Fraction(c, d))
    question = (
        f"{name} has {total} {thing}. {pronoun.capitalize()} gives {_frac(a, b)} of them to a brother and "
        f"then {_frac(c, d)} of the remaining {thing} to a friend. How many {thing} does {name} have left?"
    )
    return Problem(question, format_answer(left))


def _ages(rng: random.Random) -> Problem:
    (older, _), (younger, _) = rng.sample(_PEOPLE, 2)
    age, times, years = rng.randint(3, 15), rng.randint(2, 4), rng.randint(2, 10)
    total = age + times * age + 2 * years
    question = (
        f"{older} is {times} times as old as {younger}. In {years} years the sum of their ages will be "
        f"{total}. How old is {younger} now?"
    )
    return Problem(question, str(age))


def _path_area(rng: random.Random) -> Problem:
    length, width = rng.randint(5, 30), rng.randint(3, 20)
    path = Fraction(rng.choice((1, 2, 3, 4)), 2)
    area = (length + 2 * path) * (width + 2 * path) - length * width
    question = (
        f"A rectangular garden is {length} m long and {width} m wide. A path {format_answer(path)} m wide "
        "runs all around the outside of the garden. What is the area of the path in square meters?"
    )
    return Problem(question, format_answer(area))


def _laps(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    track, laps, days = rng.choice((200, 250, 400)), rng.randint(3, 15), rng.randint(2, 7)
    question = (
        f"{name} runs {laps} laps of a {track}-meter track every day for {days} days. "
        f"How many kilometers does {pronoun} run in total?"
    )
    return Problem(question, format_answer(Fraction(track * laps * days, 1000)))


def _average(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    while True:
        scores = [rng.randint(60, 100) for _ in range(rng.randint(3, 5))]
        target = rng.randint(70, 95)
        needed = target * (len(scores) + 1) - sum(scores)
        if 0 <= needed <= 100:
            break
    question = (
        f"{name}'s scores on the first {len(scores)} tests were {', '.join(map(str, scores))}. What score "
        f"does {pronoun} need on the next test to average exactly {target} over all {len(scores) + 1} tests?"
    )
    return Problem(question, str(needed))


def _pizza(rng: random.Random) -> Problem:
    (first, _), (second, _) = rng.sample(_PEOPLE, 2)
    b, d = rng.randint(3, 8), rng.randint(2, 6)
    a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
    left = (1 - Fraction(a, b)) * (1 - Fraction(c, d))
    question = (
        f"{first} eats {_frac(a, b)} of a pizza, and then {second} eats {_frac(c, d)} of what is left. "
        "What fraction of the whole pizza remains? Give the answer as a fraction."
    )
    return Problem(question, format_answer(left, prefer_fraction=True))


def _recipe(rng: random.Random) -> Problem:
    cups, batch = rng.choice((Fraction(3, 2), Fraction(2), Fraction(9, 4), Fraction(3), Fraction(5, 2))), 12
    wanted = rng.choice((6, 18, 30, 36, 40, 54))
    question = (
        f"A recipe uses {format_answer(cups)} cups of flour to make {batch} cookies. How many cups of flour "
        f"are needed to make {wanted} cookies?"
    )
    return Problem(question, format_answer(cups * wanted / batch))


TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "shopping": _shopping,
    "travel": _travel,
    "work_rate": _work_rate,
    "ratio": _ratio,
    "percent": _percent,
    "fraction_of_quantity": _fraction_of_quantity,
    "ages": _ages,
    "path_area": _path_area,
    "laps": _laps,
    "average": _average,
    "pizza": _pizza,
    "recipe": _recipe,
}
"""Template name -> generator. Each generator draws only from the RNG it is given."""


def draw_word_problem(rng: random.Random) -> Problem:
    """One problem from a template chosen by ``rng``."""
    return TEMPLATES[rng.choice(sorted(TEMPLATES))](rng)


# -- one-step problems: the first rung (``math_easy``) ------------------------------------------


def _gets_more(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    thing = rng.choice(_COUNTABLES)
    have, more = rng.randint(2, 20), rng.randint(2, 20)
    question = f"{name} has {have} {thing}. {pronoun.capitalize()} gets {more} more. How many {thing} does {name} have now?"
    return Problem(question, str(have + more))


def _gives_away(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    thing = rng.choice(_COUNTABLES)
    have = rng.randint(5, 30)
    gave = rng.randint(1, have - 1)
    question = (
        f"{name} has {have} {thing} and gives {gave} of them away. How many {thing} does {pronoun} have left?"
    )
    return Problem(question, str(have - gave))


def _packs(rng: random.Random) -> Problem:
    name, pronoun = _person(rng)
    thing = rng.choice(_COUNTABLES)
    packs, each = rng.randint(2, 9), rng.randint(2, 9)
    question = (
        f"{name} buys {packs} packs of {thing}. Each pack holds {each} {thing}. "
        f"How many {thing} does {pronoun} buy in total?"
    )
    return Problem(question, str(packs * each))


def _share(rng: random.Random) -> Problem:
    name, _ = _person(rng)
    thing = rng.choice(_COUNTABLES)
    friends, each = rng.randint(2, 6), rng.randint(2, 9)
    question = (
        f"{name} shares {friends * each} {thing} equally among {friends} friends. "
        f"How many {thing} does each friend get?"
    )
    return Problem(question, str(each))


ONE_STEP_TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    "gets_more": _gets_more,
    "gives_away": _gives_away,
    "packs": _packs,
    "share": _share,
}
"""One operation on small whole numbers: addition, subtraction, multiplication, division."""


def draw_one_step_problem(rng: random.Random) -> Problem:
    """One problem from a one-step template chosen by ``rng``."""
    return ONE_STEP_TEMPLATES[rng.choice(sorted(ONE_STEP_TEMPLATES))](rng)
