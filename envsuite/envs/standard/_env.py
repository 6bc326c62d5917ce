"""One item of a standard set as a single-turn episode, scored as the set's reference implementation does.

Reward (:class:`~envsuite.envs.ProblemEnv`'s): ``correct + format_coef * (format_ok - 1)``, so a mean
of ``correct`` is the set's accuracy. ``format_ok``: the math sets' answer came boxed; the choice sets'
letter came from the reference's own pattern (not only from a lone letter at the end).
"""

from __future__ import annotations

import re

from envsuite.core import EnvContext
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict
from envsuite.envs.standard._items import BenchedInOrder, Item, load_records, make_item
from envsuite.envs.standard._sets import BY_NAME, Scoring, StandardSet
from envsuite.grading import (
    DEFAULT_TIMEOUT_S,
    AnswerSource,
    GradeOutcome,
    GradeResult,
    extract_final_answer,
    grade_answer_async,
)

GPQA_ANSWER = re.compile(r"(?i)Answer[ \t]*:[ \t]*\$?([A-D])\$?")
"""simple-evals' ``ANSWER_PATTERN_MULTICHOICE``: the first ``Answer: X`` in the reply."""
MMLU_PRO_ANSWERS = (
    re.compile(r"answer is \(?([A-J])\)?"),
    re.compile(r".*[aA]nswer:\s*([A-J])"),
)
"""MMLU-Pro's ``extract_answer`` then ``extract_again`` (``evaluate_from_api.py``)."""
MMLU_PRO_LAST_LETTER = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.DOTALL)
"""MMLU-Pro's ``extract_final``: the last lone letter A-J (its fallback; format not kept)."""


def extract_letter(standard: StandardSet, reply: str) -> tuple[str | None, bool]:
    """The letter a reply commits to by the set's reference rule, and whether its main pattern found it."""
    if standard.name == "gpqa_diamond":
        match = GPQA_ANSWER.search(reply)
        return (match.group(1).upper(), True) if match else (None, False)
    for pattern in MMLU_PRO_ANSWERS:
        match = pattern.search(reply)
        if match:
            return match.group(1), True
    last = MMLU_PRO_LAST_LETTER.search(reply)
    return (last.group(0), False) if last else (None, False)


class StandardSetEnv(BenchedInOrder, ProblemEnv):
    """One item of a standard set (``standard/<name>``); an eval set (both splits hold every item).

    ``item`` picks one by index; otherwise the seed does (``seed % n``). ``data_file`` reads the set
    from a JSONL file in the upstream schema instead of ``ENVSUITE_<NAME>_FILE`` or the hub.
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        name: str = "gsm8k",
        item: int | None = None,
        data_file: str | None = None,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
        grade_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """``name``: a set of :data:`STANDARD_SETS`; ``item``: an index (default: from the seed);
        ``data_file``: a JSONL of upstream records; ``grade_timeout_s``: math-verify's bound."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if name not in BY_NAME:
            raise ValueError(f"unknown standard set {name!r}; known: {sorted(BY_NAME)}")
        self.standard = BY_NAME[name]
        if self.standard.scoring is Scoring.SANDBOX_TESTS:
            raise ValueError(f"{name} runs code: it is a StandardCodeEnv or LiveCodeBenchEnv")
        if self.standard.scoring is Scoring.INSTRUCTIONS:
            raise ValueError(f"{name} checks instructions: it is an InstructionsEnv")
        records = load_records(self.standard, data_file)
        index = ctx.seed % len(records) if item is None else item
        if not 0 <= index < len(records):
            raise ValueError(f"item must be in 0..{len(records) - 1}, got {index}")
        self.item: Item = make_item(self.standard, records[index], index)
        self.problem = Problem(question=self.item.prompt, answer=self.item.reference)
        self.prompt = self.item.prompt
        self.grade_timeout_s = grade_timeout_s

    def answer_reply(self, answer: str) -> str:
        if self.standard.scoring is Scoring.MATH_VERIFY:
            return f"\\boxed{{{answer}}}"
        if self.standard.name == "gpqa_diamond":
            return f"Answer: {answer}"
        return f"the answer is ({answer})"

    def junk_answer(self) -> str:
        if self.standard.scoring is Scoring.CHOICE_LETTER:
            return next(letter for letter in self.item.letters if letter != self.item.reference)
        return super().junk_answer()

    async def check(self, reply: str) -> Verdict:
        if self.standard.scoring is Scoring.CHOICE_LETTER:
            letter, in_format = extract_letter(self.standard, reply)
            if letter is None:
                return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no answer letter"), False, None)
            right = letter == self.item.reference
            outcome = GradeOutcome.CORRECT if right else GradeOutcome.WRONG
            return Verdict(GradeResult(outcome, f"{letter} vs {self.item.reference}"), in_format, letter)
        extracted = extract_final_answer(reply)
        if extracted is None:
            return Verdict(
                GradeResult(GradeOutcome.UNPARSEABLE, "no boxed answer and no number"), False, None
            )
        grade = await grade_answer_async(extracted.text, self.item.reference, timeout_s=self.grade_timeout_s)
        return Verdict(grade, extracted.source is AnswerSource.BOXED, extracted.text)
