"""``envsuite judge-check``'s measurement: a judge against the shipped labelled sets.

Pointwise items (a task, a reply, a yes/no question, an honest label) give agreement; pairwise items
(two replies, the better one labelled) are judged in both orders for position bias; self-preference
compares how often the judge says YES to replies written by its own model against the labels' rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from envsuite.core import MessageCompleter
from envsuite.rubrics._agreement import Agreement, PositionBias, agreement, position_bias
from envsuite.rubrics._contract import JudgeCriterion
from envsuite.rubrics._judge import JudgeModel, pairwise_prompt, pointwise_prompt
from envsuite.rubrics._verdict import PairOutcome, VerdictOutcome, parse_pair, parse_verdict

CHECK_HASH = "judge-check-v1"
"""The cache namespace of judge-check's prompts (they belong to no rubric)."""


@dataclass(frozen=True)
class PointwiseItem:
    prompt: str
    reply: str
    question: str
    label: bool


@dataclass(frozen=True)
class PairwiseItem:
    prompt: str
    first: str
    second: str
    question: str
    better: str


@dataclass(frozen=True)
class SelfPreference:
    """The judge's YES rate on replies its own model wrote, beside its YES rate on the labelled replies."""

    own_yes_rate: float
    labelled_yes_rate: float
    n: int


@dataclass(frozen=True)
class JudgeCheckReport:
    judge: str
    agreement: Agreement
    position: PositionBias
    self_preference: SelfPreference | None


def _data(name: str, path: Path | None) -> list[dict[str, object]]:
    text = (
        path.read_text() if path else resources.files("envsuite.rubrics").joinpath("data", name).read_text()
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_pointwise(path: Path | None = None) -> list[PointwiseItem]:
    return [PointwiseItem(**row) for row in _data("pointwise.jsonl", path)]  # type: ignore[arg-type]


def load_pairwise(path: Path | None = None) -> list[PairwiseItem]:
    return [PairwiseItem(**row) for row in _data("pairwise.jsonl", path)]  # type: ignore[arg-type]


async def _pointwise(judge: JudgeModel, items: list[PointwiseItem]) -> list[bool | None]:
    asks = [pointwise_prompt(JudgeCriterion("check", i.question), i.prompt, i.reply) for i in items]
    verdicts = [
        parse_verdict(t, JudgeCriterion("check", "").verdict) for t in await judge.ask(asks, CHECK_HASH)
    ]
    return [
        None if v.outcome is VerdictOutcome.MALFORMED else v.outcome is VerdictOutcome.YES for v in verdicts
    ]


def _letter(outcome: PairOutcome) -> str:
    return {PairOutcome.FIRST: "A", PairOutcome.SECOND: "B"}.get(outcome, outcome.value)


async def run_judge_check(
    judge: JudgeModel,
    pointwise: list[PointwiseItem],
    pairwise: list[PairwiseItem],
    own_model: MessageCompleter | None = None,
    seed: int = 0,
) -> JudgeCheckReport:
    """Agreement, position bias and (with ``own_model``: the judged model is the judge's) self-preference."""
    predicted = await _pointwise(judge, pointwise)
    forward = [pairwise_prompt(p.question, p.prompt, p.first, p.second) for p in pairwise]
    swapped = [pairwise_prompt(p.question, p.prompt, p.second, p.first) for p in pairwise]
    replies = await judge.ask(forward + swapped, CHECK_HASH)
    letters = [_letter(parse_pair(t)) for t in replies]
    n = len(pairwise)
    bias = position_bias(letters[:n], letters[n:], [p.better for p in pairwise], seed=seed)
    preference = None
    if own_model is not None:
        own = [
            PointwiseItem(
                i.prompt,
                (await own_model([{"role": "user", "content": i.prompt}]))["content"],
                i.question,
                True,
            )
            for i in pointwise[::2]
        ]
        own_verdicts = await _pointwise(judge, own)
        labelled = [p for p in predicted if p is not None]
        preference = SelfPreference(
            own_yes_rate=sum(v is True for v in own_verdicts) / len(own),
            labelled_yes_rate=sum(labelled) / max(1, len(labelled)),
            n=len(own),
        )
    return JudgeCheckReport(
        judge.identity(), agreement(predicted, [i.label for i in pointwise], seed=seed), bias, preference
    )
