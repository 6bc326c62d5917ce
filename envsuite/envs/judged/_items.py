"""The shipped instruction items, their seeded train/test split, and the rubric each one is scored by.

Every item's rubric (:func:`item_rubric`) is built the same way from its data:

- **guards** (weight 0): ``substantive`` (at least three words), ``own_words`` (not a copy of the
  prompt), ``no_judge_talk`` (nothing addressed to a judge: "ignore previous instructions", a
  ``VERDICT:`` or ``SCORE:`` line, talk of judges and criteria) and ``no_rubric_text`` (none of the
  item's judge questions written out). Each gates every other criterion, so a reply that fails one
  earns 0 whatever a judge says of it.
- **code criteria** (weight 1 each): the item's ``checks`` (:mod:`envsuite.envs.judged.checks`), one
  ``mentions_<word>`` per keyword and one ``avoids_<word>`` per forbidden word (whole words, any case).
- **judge criteria**: the item's yes/no questions, weighted so that together they weigh as much as the
  code criteria (half the reward); dropped in the judge-less variant, which is scored by code alone.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from envsuite.core import Split
from envsuite.envs.judged.checks import GUARDS, CheckSpec
from envsuite.rubrics import Criterion, FunctionCriterion, JudgeCriterion, RegexCriterion, Rubric

ITEMS_FILE = "instructions.toml"
SPLIT_SEED = 58
"""The seed of the train/test shuffle (issue 58): changing it changes which items are held out."""
TEST_ITEMS = 16
"""Items held out for the test split; the rest are the train split."""
JUDGE_TALK = (
    r"(?i)ignore\s+(?:all\s+|any\s+)?(?:the\s+|your\s+|my\s+)?(?:previous|prior|above|earlier|other)\s+"
    r"(?:instructions|rules)|\b(?:verdict|score|rating|grade)\s*[:=]|\bdoes\s+the\s+response\b|"
    r"\b(?:judge|grader|rubric|evaluator|criteri(?:on|a))s?\b|\bfull\s+marks\b|\b10\s*/\s*10\b"
)
"""What a reply addressed to the judge says (the ``no_judge_talk`` guard, negated)."""


@dataclass(frozen=True)
class InstructionItem:
    """One open-ended instruction and the data its rubric is built from."""

    id: str
    prompt: str
    reference: str
    """A reply that passes every code criterion (the judge-less variant's full-marks answer)."""
    checks: tuple[str, ...]
    keywords: tuple[str, ...]
    """Words the reply must contain; ``a|b`` accepts either."""
    forbidden: tuple[str, ...]
    judge: tuple[str, ...]
    """Yes/no questions for the judge, each phrased "Does/Is the response ...?"."""


@functools.cache
def _text() -> str:
    return resources.files("envsuite.envs.judged").joinpath("data", ITEMS_FILE).read_text(encoding="utf-8")


@functools.cache
def load_items() -> tuple[InstructionItem, ...]:
    """Every shipped item, in file order."""
    rows = tomllib.loads(_text())["items"]
    return tuple(
        InstructionItem(
            id=str(row["id"]),
            prompt=str(row["prompt"]),
            reference=str(row["reference"]),
            checks=tuple(row.get("checks", ())),
            keywords=tuple(row.get("keywords", ())),
            forbidden=tuple(row.get("forbidden", ())),
            judge=tuple(row.get("judge", ())),
        )
        for row in rows
    )


def items_revision() -> str:
    """The items file's content hash: what a bench row records as the dataset revision."""
    return f"{ITEMS_FILE} sha256:{hashlib.sha256(_text().encode()).hexdigest()[:16]}"


@functools.cache
def split_items(split: Split) -> tuple[InstructionItem, ...]:
    """The items of ``split``: a seeded shuffle of the ids (:data:`SPLIT_SEED`), the first
    :data:`TEST_ITEMS` held out for test, the rest train; disjoint, and the same in every process."""
    ids = sorted(item.id for item in load_items())
    random.Random(SPLIT_SEED).shuffle(ids)
    held_out = set(ids[:TEST_ITEMS])
    return tuple(item for item in load_items() if (item.id in held_out) == (split == "test"))


def _slug(word: str) -> str:
    return re.sub(r"\W+", "_", word.lower()).strip("_")


def _word_pattern(words: str) -> str:
    return r"(?i)\b(?:" + "|".join(re.escape(w) for w in words.split("|")) + r")\b"


def _code_criteria(item: InstructionItem) -> list[Criterion]:
    found: list[Criterion] = []
    for text in item.checks:
        spec = CheckSpec.parse(text)
        found.append(FunctionCriterion(spec.name, spec.target))
    found += [RegexCriterion(f"mentions_{_slug(w)}", _word_pattern(w)) for w in item.keywords]
    found += [RegexCriterion(f"avoids_{_slug(w)}", _word_pattern(w), negate=True) for w in item.forbidden]
    return found


def _rubric_text(item: InstructionItem) -> str:
    """A pattern matching any of ``item``'s judge questions written out (any case and spacing)."""
    questions = [r"\s+".join(map(re.escape, q.rstrip("?").split())) for q in item.judge]
    return "(?i)" + "|".join(questions) if questions else r"(?!)"


def guard_criteria(item: InstructionItem) -> list[Criterion]:
    """The guards every item's rubric starts with (weight 0; they gate all the rest)."""
    guards: list[Criterion] = [FunctionCriterion(g.value, CheckSpec(g).target, weight=0.0) for g in GUARDS]
    return [
        *guards,
        RegexCriterion("no_judge_talk", JUDGE_TALK, weight=0.0, negate=True),
        RegexCriterion("no_rubric_text", _rubric_text(item), weight=0.0, negate=True),
    ]


def item_rubric(item: InstructionItem, *, judged: bool) -> Rubric:
    """``item``'s rubric (module docstring); ``judged=False`` leaves out its judge criteria."""
    guards = guard_criteria(item)
    code = [c for c in _code_criteria(item) if c.name not in {g.name for g in guards}]
    judge: list[Criterion] = []
    if judged and item.judge:
        weight = max(1.0, float(len(code))) / len(item.judge)
        judge = [JudgeCriterion(f"judge_{i + 1}", q, weight=weight) for i, q in enumerate(item.judge)]
    scored = [*code, *judge]
    needed = tuple(g.name for g in guards)
    return Rubric(
        name=f"instructions/{item.id}" + ("" if judged else "/code"),
        criteria=(*guards, *scored),
        gates=tuple((c.name, needed) for c in scored),
    )
