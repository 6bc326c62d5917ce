"""Judged rewards: rubrics as data, judge models as partners, and how far a judge can be trusted.

A :class:`Rubric` holds weighted criteria checked by code (:class:`RegexCriterion`,
:class:`FunctionCriterion`) or by a judge (:class:`JudgeCriterion`), combined as a weighted mean or
all-of, with code gates in front of judge criteria; it serializes to TOML/JSON and its content hash
names it in result keys. A :class:`JudgeModel` wraps any :class:`~envsuite.core.MessageCompleter` and
caches its judgments in SQLite (:class:`JudgmentCache`). :func:`run_judge_check` measures a judge
against the shipped labelled sets. docs/rubrics.md has the whole story::

    rubric = load_rubric("my_rubric.toml")
    judge = JudgeModel(completer, JudgmentCache("judgments.sqlite"))
    scores = await score_group(rubric, [Scored(prompt, reply)], judge)
"""

from __future__ import annotations

from envsuite.rubrics._agreement import Agreement, PositionBias, agreement, cohen_kappa, position_bias
from envsuite.rubrics._check import (
    JudgeCheckReport,
    PairwiseItem,
    PointwiseItem,
    SelfPreference,
    load_pairwise,
    load_pointwise,
    run_judge_check,
)
from envsuite.rubrics._contract import (
    Combine,
    Criterion,
    FunctionCriterion,
    JudgeCriterion,
    RegexCriterion,
    Rubric,
    Timing,
    VerdictFormat,
    load_rubric,
)
from envsuite.rubrics._judge import (
    JudgeModel,
    JudgeStats,
    JudgmentCache,
    local_judge,
    pairwise_prompt,
    pointwise_prompt,
)
from envsuite.rubrics._partner import (
    NO_JUDGE,
    JudgeRef,
    as_judge,
    forget_shared_judges,
    judge_identity,
    shared_judge,
)
from envsuite.rubrics._score import CriterionScore, RubricScore, Scored, score_group
from envsuite.rubrics._step import RubricStepEnv, last_prompt, reply_text
from envsuite.rubrics._verdict import PairOutcome, Verdict, VerdictOutcome, parse_pair, parse_verdict
from envsuite.rubrics._wrap import RubricDataset, RubricGroupBuilder

__all__ = [
    # rubrics as data
    "Rubric",
    "Criterion",
    "RegexCriterion",
    "FunctionCriterion",
    "JudgeCriterion",
    "Combine",
    "Timing",
    "VerdictFormat",
    "load_rubric",
    # judges
    "JudgeModel",
    "JudgeStats",
    "JudgmentCache",
    "local_judge",
    "pointwise_prompt",
    "pairwise_prompt",
    # judges as env partners
    "NO_JUDGE",
    "JudgeRef",
    "as_judge",
    "shared_judge",
    "forget_shared_judges",
    "judge_identity",
    "Verdict",
    "VerdictOutcome",
    "PairOutcome",
    "parse_verdict",
    "parse_pair",
    # scoring
    "Scored",
    "CriterionScore",
    "RubricScore",
    "score_group",
    "RubricGroupBuilder",
    "RubricDataset",
    "RubricStepEnv",
    "last_prompt",
    "reply_text",
    # trust
    "Agreement",
    "PositionBias",
    "SelfPreference",
    "JudgeCheckReport",
    "PointwiseItem",
    "PairwiseItem",
    "agreement",
    "cohen_kappa",
    "position_bias",
    "load_pointwise",
    "load_pairwise",
    "run_judge_check",
]
