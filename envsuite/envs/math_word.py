"""``math``: word problems with a final numeric or LaTeX answer, graded by math-verify.

Sources, in order of precedence:

* ``dataset=PATH``: a JSONL file in GSM8K or MATH format (see :mod:`envsuite.envs._datasets`). Train
  and test are split by a hash of each question (about 10% test), unless ``test_dataset=PATH`` is
  given: then ``dataset`` is the train split and ``test_dataset`` the test split.
* ``hf_dataset="openai/gsm8k"`` (with ``hf_config="main"``): a hub dataset, its own ``train``/``test``
  splits; needs the optional ``datasets`` package and network access.
* neither: procedural word problems (:mod:`envsuite.envs._word_problems`), split by hash:
  multi-step ones by default, one-step ones with ``problems="one_step"`` (the ``math_easy`` rung).

The prompt asks for step-by-step reasoning ending with the answer in ``\\boxed{}``. The last box is
the answer (format OK); a reply without one is graded on its last number with format 0. With
``answer_format="number"`` it asks for the number only: a reply that is just a number is the answer
(format OK); otherwise the last box or number is graded, with format 0.
"""

from __future__ import annotations

import random

from envsuite.core import EnvContext
from envsuite.envs._datasets import MathDatasetError, load_hub, load_jsonl
from envsuite.envs._problem import (
    DEFAULT_FORMAT_COEF,
    Problem,
    ProblemEnv,
    Verdict,
    draw_for_split,
)
from envsuite.envs._word_problems import draw_one_step_problem, draw_word_problem
from envsuite.grading import (
    DEFAULT_TIMEOUT_S,
    AnswerSource,
    GradeOutcome,
    GradeResult,
    extract_final_answer,
    grade_answer_async,
    parse_number,
)

INSTRUCTION = (
    "Solve the problem step by step. At the end, write the final answer alone inside \\boxed{}, "
    "for example \\boxed{42}."
)
"""Appended to every question (after a blank line)."""

NUMBER_INSTRUCTION = "Reply with the number only."
"""Appended instead with ``answer_format="number"`` (the ``math_easy`` rung)."""

PROCEDURAL = {"multi_step": draw_word_problem, "one_step": draw_one_step_problem}
"""The procedural problem sets, by the name the ``problems`` argument takes."""


class MathWordEnv(ProblemEnv):
    """Solve one word problem; the boxed final answer is checked with math-verify."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        dataset: str | None = None,
        test_dataset: str | None = None,
        hf_dataset: str | None = None,
        hf_config: str | None = None,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
        grade_timeout_s: float = DEFAULT_TIMEOUT_S,
        problems: str = "multi_step",
        answer_format: str = "boxed",
    ) -> None:
        """``dataset``/``test_dataset``: JSONL paths; ``hf_dataset``/``hf_config``: a hub dataset;
        ``grade_timeout_s``: wall-clock bound on one math-verify check; ``problems``: which procedural
        problems to draw when no dataset is given (``multi_step`` or ``one_step``); ``answer_format``:
        ``boxed`` (reason, then ``\\boxed{}``) or ``number`` (the whole reply is the number)."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if grade_timeout_s <= 0:
            raise ValueError(f"grade_timeout_s must be > 0, got {grade_timeout_s}")
        if dataset is not None and hf_dataset is not None:
            raise ValueError("pass either dataset (a local JSONL) or hf_dataset (a hub dataset), not both")
        if test_dataset is not None and dataset is None:
            raise ValueError("test_dataset needs dataset (the train split) as well")
        if answer_format not in ("boxed", "number"):
            raise ValueError(f"answer_format must be 'boxed' or 'number', got {answer_format!r}")
        self.answer_format = answer_format
        if problems not in PROCEDURAL:
            raise ValueError(f"problems must be one of {sorted(PROCEDURAL)}, got {problems!r}")
        self.grade_timeout_s = grade_timeout_s
        rng = random.Random(ctx.seed)
        if dataset is not None:
            self.problem = _pick_from_file(rng, dataset, test_dataset, ctx)
        elif hf_dataset is not None:
            hub_problems = load_hub(hf_dataset, hf_config, ctx.split)
            self.problem = hub_problems[rng.randrange(len(hub_problems))]
        else:
            draw = PROCEDURAL[problems]
            self.problem = draw_for_split(lambda: draw(rng), lambda p: p.question, ctx.split)
        instruction = INSTRUCTION if answer_format == "boxed" else NUMBER_INSTRUCTION
        self.prompt = f"{self.problem.question}\n\n{instruction}"

    def answer_reply(self, answer: str) -> str:
        return f"\\boxed{{{answer}}}" if self.answer_format == "boxed" else answer

    async def check(self, reply: str) -> Verdict:
        if self.answer_format == "number" and parse_number(reply) is not None:
            grade = await grade_answer_async(
                reply.strip(), self.problem.answer, timeout_s=self.grade_timeout_s
            )
            return Verdict(grade, True, reply.strip())
        extracted = extract_final_answer(reply)
        if extracted is None:
            return Verdict(
                GradeResult(GradeOutcome.UNPARSEABLE, "no boxed answer and no number"), False, None
            )
        grade = await grade_answer_async(extracted.text, self.problem.answer, timeout_s=self.grade_timeout_s)
        boxed_ok = self.answer_format == "boxed" and extracted.source is AnswerSource.BOXED
        return Verdict(grade, boxed_ok, extracted.text)


def _pick_from_file(rng: random.Random, dataset: str, test_dataset: str | None, ctx: EnvContext) -> Problem:
    if test_dataset is not None:
        problems = load_jsonl(test_dataset if ctx.split == "test" else dataset)
    else:
        problems = load_jsonl(dataset, ctx.split)
        if not problems:
            raise MathDatasetError(
                f"{dataset}: no problem falls in the {ctx.split!r} split (about 10% of questions, chosen "
                "by hash, are test); add problems or pass test_dataset= for an explicit split"
            )
    return problems[rng.randrange(len(problems))]
