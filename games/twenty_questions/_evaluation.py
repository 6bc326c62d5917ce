"""Accuracy of an answerer on a labelled (word, question, answer) set."""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.games.twenty_questions._answer import Answer, Answerer

LABELLED_FILE = "data/labelled_questions.jsonl"
"""Held out: written before the rules were run on it, never used to tune them."""
DEV_FILE = "data/dev_questions.jsonl"
"""The set the rules were tuned on."""
_LABELS = {"yes": Answer.YES, "no": Answer.NO, "unknown": Answer.UNKNOWN}


@dataclass(frozen=True)
class LabelledCase:
    word: str
    question: str
    answer: Answer


@dataclass(frozen=True)
class AccuracyReport:
    """How an answerer did on a labelled set."""

    total: int
    correct: int
    confident_wrong: int
    """Yes/No given where the label says otherwise (the costly mistake; abstaining is cheaper)."""
    per_label: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Label -> (correct, total)."""
    misses: list[tuple[LabelledCase, Answer]] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


def load_labelled_cases(name: str = LABELLED_FILE) -> list[LabelledCase]:
    """Read a JSONL set shipped in the package (``data/labelled_questions.jsonl`` by default)."""
    text = (
        importlib.resources.files("envsuite.games.twenty_questions")
        .joinpath(name)
        .read_text(encoding="utf-8")
    )
    cases = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("answer") not in _LABELS:
            raise ValueError(f"{name}:{number}: answer must be one of {sorted(_LABELS)}")
        cases.append(LabelledCase(row["word"], row["question"], _LABELS[row["answer"]]))
    return cases


async def evaluate_answerer(answerer: Answerer, cases: Sequence[LabelledCase]) -> AccuracyReport:
    """Ask every case's question about its word and compare with the label."""
    correct = confident_wrong = 0
    per_label: dict[str, list[int]] = {}
    misses: list[tuple[LabelledCase, Answer]] = []
    for case in cases:
        got = await answerer.answer(case.word, case.question)
        tally = per_label.setdefault(case.answer.name.lower(), [0, 0])
        tally[1] += 1
        if got is case.answer:
            correct += 1
            tally[0] += 1
        else:
            misses.append((case, got))
            confident_wrong += got is not Answer.UNKNOWN
    return AccuracyReport(
        total=len(cases),
        correct=correct,
        confident_wrong=confident_wrong,
        per_label={k: (v[0], v[1]) for k, v in per_label.items()},
        misses=misses,
    )
