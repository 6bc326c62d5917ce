"""The env behind ``reasoning_gym/<name>``: one procedural reasoning-gym problem, graded by its scorer."""

from __future__ import annotations

import importlib
import re
from typing import NotRequired, Protocol, TypedDict

from envsuite.core import Action, ActionExtra, EnvContext, StepResult
from envsuite.envs import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict, split_of
from envsuite.grading import GradeOutcome, GradeResult

INSTRUCTION = "Give your final answer inside <answer></answer> tags, e.g. <answer>42</answer>."
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CANDIDATES = 64
"""Problems drawn per episode seed until one falls in the requested split."""
_MAX_ANSWER_CHARS = 2000


def read_answer(reply: str) -> tuple[str | None, bool]:
    """The last ``<answer>`` block (format OK), else the last non-empty line (format not OK)."""
    found = _ANSWER.findall(reply)
    if found:
        return found[-1].strip()[:_MAX_ANSWER_CHARS], True
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    return (lines[-1][:_MAX_ANSWER_CHARS], False) if lines else (None, False)


class ProblemEntry(TypedDict):
    """One reasoning-gym problem as its datasets give it."""

    question: str
    answer: str
    metadata: NotRequired[dict[str, object]]
    """The generator's parameters and whatever its scorer needs."""


class _Dataset(Protocol):
    """The slice of a reasoning-gym dataset the env uses (reasoning-gym ships no type information)."""

    def __getitem__(self, index: int) -> ProblemEntry: ...

    def score_answer(self, answer: str, entry: ProblemEntry) -> float: ...


class ReasoningGymEnv(ProblemEnv):
    """One reasoning-gym problem (``dataset`` names it; ``config`` goes to ``create_dataset``).

    Reward: ``correct + format_coef * (format_ok - 1)`` where correct means the dataset's own scorer
    gave 1.0; its raw score is reported as the ``score`` metric (some scorers give partial credit).
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        dataset: str,
        config: dict[str, object] | None = None,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        rg = importlib.import_module("reasoning_gym")
        # reasoning-gym seeds numpy too, which needs a 32-bit seed.
        self._data: _Dataset = rg.create_dataset(
            dataset, seed=ctx.seed % 2**31, size=_CANDIDATES, **(config or {})
        )
        self.entry = self._pick_entry(dataset)
        self.problem = Problem(question=str(self.entry["question"]), answer=str(self.entry["answer"]))
        self.prompt = f"{self.problem.question}\n\n{INSTRUCTION}"
        self._score = 0.0

    def _pick_entry(self, dataset: str) -> ProblemEntry:
        for index in range(_CANDIDATES):
            entry = self._data[index]
            if split_of(str(entry["question"])) == self.ctx.split:
                return entry
        raise ValueError(f"reasoning_gym/{dataset}: no {self.ctx.split!r} problem in {_CANDIDATES} draws")

    async def check(self, reply: str) -> Verdict:
        answer, format_ok = read_answer(reply)
        if answer is None:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no answer"), format_ok, None)
        try:
            self._score = float(self._data.score_answer(answer, self.entry))
        except Exception as exc:
            # Some scorers parse the answer and raise on junk; that is a wrong answer, not a crash.
            return Verdict(
                GradeResult(GradeOutcome.WRONG, f"scorer rejected it: {exc!r}"[:200]), format_ok, answer
            )
        outcome = GradeOutcome.CORRECT if self._score >= 1.0 else GradeOutcome.WRONG
        return Verdict(GradeResult(outcome, f"reasoning-gym score {self._score:.3f}"), format_ok, answer)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        result.metrics["score"] = self._score
        return result
