"""Scoring replies with a rubric: code criteria here, judge criteria through one batched judge call.

:func:`score_group` is what a group-reward hook calls: every judge question of every reply in the group
goes to the judge in one batch (cached ones skipped). Gates apply after scoring: a gated criterion whose
gates did not all pass scores 0.0 and is marked ``gated``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envsuite.errors import UsageError
from envsuite.rubrics._contract import (
    Combine,
    Criterion,
    FunctionCriterion,
    JudgeCriterion,
    RegexCriterion,
    Rubric,
)
from envsuite.rubrics._judge import JudgeModel, pointwise_prompt
from envsuite.rubrics._verdict import VerdictOutcome, parse_verdict


@dataclass(frozen=True)
class CriterionScore:
    name: str
    score: float
    verdict: VerdictOutcome | None
    """The judge's outcome for a judge criterion; None for code."""
    gated: bool
    """True when a gate failed, so the criterion counted 0.0 whatever it scored."""


@dataclass(frozen=True)
class RubricScore:
    reward: float
    criteria: tuple[CriterionScore, ...]

    def of(self, name: str) -> CriterionScore:
        return next(c for c in self.criteria if c.name == name)


@dataclass(frozen=True)
class Scored:
    """One (prompt, reply) to score."""

    prompt: str
    reply: str


def resolve_function(target: str) -> Callable[[str, str], float]:
    module, _, attr = target.partition(":")
    try:
        function: Callable[[str, str], float] = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise UsageError(f"rubric function {target!r} cannot be imported: {err}") from err
    return function


def _code_score(criterion: Criterion, item: Scored) -> float:
    if isinstance(criterion, RegexCriterion):
        hit = re.search(criterion.pattern, item.reply, re.DOTALL) is not None
        return float(hit != criterion.negate)
    assert isinstance(criterion, FunctionCriterion)
    return min(1.0, max(0.0, float(resolve_function(criterion.function)(item.prompt, item.reply))))


def _combine(rubric: Rubric, scores: Sequence[CriterionScore]) -> float:
    if rubric.combine is Combine.ALL_OF:
        return float(all(s.score >= 1.0 for s in scores))
    weights = {c.name: c.weight for c in rubric.criteria}
    total = sum(weights.values())
    return sum(weights[s.name] * s.score for s in scores) / total


def _gates_hold(rubric: Rubric, criterion: Criterion, item: Scored) -> bool:
    return all(_code_score(_named(rubric, g), item) >= 1.0 for g in rubric.gates_of(criterion.name))


def _named(rubric: Rubric, name: str) -> Criterion:
    return next(c for c in rubric.criteria if c.name == name)


async def score_group(
    rubric: Rubric, items: Sequence[Scored], judge: JudgeModel | None, *, skip_gated: bool = False
) -> list[RubricScore]:
    """Every item's rubric score; all judge questions of the group in one batch.

    ``skip_gated``: a judge question whose code gates failed is not sent (it would count 0 anyway); its
    criterion is scored 0, gated, with no verdict. Off by default: every question is asked, as the
    judge-check and the counted-calls tests expect."""
    judged = [c for c in rubric.criteria if isinstance(c, JudgeCriterion)]
    if judged and judge is None:
        raise UsageError(f"rubric {rubric.name!r} has judge criteria but no judge was given")
    asks = [
        (i, c)
        for i in range(len(items))
        for c in judged
        if not skip_gated or _gates_hold(rubric, c, items[i])
    ]
    replies = (
        await judge.ask(
            [pointwise_prompt(c, items[i].prompt, items[i].reply) for i, c in asks], rubric.content_hash()
        )
        if judge and asks
        else []
    )
    verdicts = {
        (i, c.name): parse_verdict(text, c.verdict) for (i, c), text in zip(asks, replies, strict=True)
    }
    results = []
    for i, item in enumerate(items):
        raw = {
            c.name: (
                (verdicts[i, c.name].score if (i, c.name) in verdicts else 0.0)
                if isinstance(c, JudgeCriterion)
                else _code_score(c, item)
            )
            for c in rubric.criteria
        }
        scores = []
        for c in rubric.criteria:
            gated = any(raw[g] < 1.0 for g in rubric.gates_of(c.name))
            verdict = verdicts.get((i, c.name))
            outcome = verdict.outcome if verdict is not None else None
            scores.append(CriterionScore(c.name, 0.0 if gated else raw[c.name], outcome, gated))
        results.append(RubricScore(_combine(rubric, scores), tuple(scores)))
    return results
