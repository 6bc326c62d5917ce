"""Judged twenty questions (``twenty_questions_judged-v0``): the final guess and its explanation scored by a
rubric that joins a code check and a judge.

The game is twenty questions as ever (the offline answerer by default), but the player is asked to give
its guess with a reason on the next line (``Guess: <word>`` then ``Because: <why>``). When the game ends,
the final reply is scored by one rubric (:func:`explanation_rubric`):

- ``correct_secret`` (code, weight 2): the reply's last ``Guess:`` line names the secret (as the game
  reads a guess: any case, an article, trailing punctuation);
- ``gives_reason`` (code, weight 1): a ``Because:`` line with a reason, counted only with the right guess;
- ``consistent`` (judge, weight 2): the judge, shown every question and answer of the game, says the
  explanation agrees with the answers received; counted only with the right guess and a reason;
- ``no_judge_talk`` (a guard, weight 0): a reply addressed to the judge gets neither of the last two.

The episode's reward is the rubric's (0 for a lost game: every criterion but the guard needs the secret).
The judge is a partner named in :attr:`TwentyQuestionsJudgedEnv.answerer_identity` beside the answerer;
``judge=None`` scores by the code criteria alone (``judge:none``). ``step_rubric`` (a ``per_step`` rubric,
a file or its dict) also scores every turn (:class:`~envsuite.rubrics.RubricStepEnv`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    Message,
    MessageCompleter,
    ProbeExpectation,
    RewardProbe,
    StepResult,
    StopReason,
)
from envsuite.envs.judged import INJECTION, JUDGE_TALK
from envsuite.games.twenty_questions._answer import Answerer
from envsuite.games.twenty_questions._kb import load_knowledge_base
from envsuite.games.twenty_questions.env import RULES_PROMPT, TwentyQuestionsEnv
from envsuite.rubrics import (
    JudgeCriterion,
    JudgeModel,
    JudgeRef,
    RegexCriterion,
    Rubric,
    RubricScore,
    RubricStepEnv,
    Scored,
    as_judge,
    judge_identity,
    load_rubric,
    score_group,
)

DEFAULT_JUDGE = "smollm2-135m-instruct"
JUDGED_RULES = (
    RULES_PROMPT + " When you guess, explain on the next line why the answers point to your word: "
    "'Because: <reason>'."
)
CONSISTENT_QUESTION = (
    "Is the explanation after 'Because:' consistent with every answer received to the questions above?"
)
REASON = "the answers I received describe it."
"""The reason of the judge-less variant's reference reply."""
_GUESS_LINE = r"^[ \t]*\**[ \t]*guess[ \t]*\**[ \t]*:"
SECRET_PLACEHOLDER = "<secret>"
"""The secret in the rubric whose identity results record (each episode's rubric names its own)."""


def _secret_pattern(names: Sequence[str]) -> str:
    """The reply's last ``Guess:`` line names one of ``names`` and nothing else (as the game reads it)."""
    spelled = "|".join(r"[\W_]+".join(map(re.escape, name.split())) for name in sorted(names))
    return (
        rf"(?im){_GUESS_LINE}[\W_]*(?:(?:a|an|the)[\W_]+)?(?:{spelled})[\W_]*$"
        rf"(?![\s\S]*{_GUESS_LINE})"
    )


def explanation_rubric(names: Sequence[str], *, judged: bool) -> Rubric:
    """The final reply's rubric for a secret called ``names`` (module docstring)."""
    guard = RegexCriterion("no_judge_talk", JUDGE_TALK, weight=0.0, negate=True)
    correct = RegexCriterion("correct_secret", _secret_pattern(names), weight=2.0)
    reason = RegexCriterion(
        "gives_reason", r"(?im)^[ \t]*\**[ \t]*because[ \t]*\**[ \t]*:[ \t]*\S.{9,}", weight=1.0
    )
    judge = [JudgeCriterion("consistent", CONSISTENT_QUESTION, weight=2.0)] if judged else []
    gates: list[tuple[str, tuple[str, ...]]] = [("gives_reason", ("correct_secret", "no_judge_talk"))]
    gates += [("consistent", ("correct_secret", "gives_reason", "no_judge_talk"))] if judged else []
    return Rubric(
        name="twenty-questions-explanation" + ("" if judged else "/code"),
        criteria=(guard, correct, reason, *judge),
        gates=tuple(gates),
    )


def transcript(conversation: Sequence[Message]) -> str:
    """The game's questions and answers before its final reply, for the judge (never the secret)."""
    turns = [m for m in conversation if m["role"] in ("assistant", "user")][1:]  # after the rules
    if turns and turns[-1]["role"] == "user":  # the answer to the final reply
        turns = turns[:-1]
    if turns and turns[-1]["role"] == "assistant":  # the final reply itself
        turns = turns[:-1]
    lines = [f"{'Q' if m['role'] == 'assistant' else 'A'}: {m['content']}" for m in turns]
    asked = "\n".join(lines) if lines else "(no questions were asked)"
    return f"A game of twenty questions. The questions asked and the answers received:\n{asked}"


class TwentyQuestionsJudgedEnv(TwentyQuestionsEnv):
    """Twenty questions whose final guess and explanation are scored by :func:`explanation_rubric`."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        secret: str | None = None,
        max_questions: int = 20,
        answerer: Answerer | MessageCompleter | None = None,
        judge: JudgeRef = DEFAULT_JUDGE,
        judge_cache: str | None = None,
    ) -> None:
        super().__init__(
            ctx, secret=secret, max_questions=max_questions, answerer=answerer, rules=JUDGED_RULES
        )
        self._judge_ref = judge
        self._judge_cache = judge_cache
        self._judge: JudgeModel | None = None
        self.judged = judge is not None and judge != "none"
        kb = load_knowledge_base()
        names = sorted(kb.entity(self.secret).names) if self.secret in kb else [self.secret]
        self.rubric = explanation_rubric(names, judged=self.judged)
        self.rubric_template = explanation_rubric([SECRET_PLACEHOLDER], judged=self.judged)

    @property
    def judge(self) -> JudgeModel | None:
        """The judge, loaded on first use (None for the judge-less variant)."""
        if self._judge is None and self.judged:
            self._judge = as_judge(self._judge_ref, self._judge_cache)
        return self._judge

    @property
    def answerer_identity(self) -> str:
        """The answerer, the explanation rubric and the judge: results of each never pool."""
        return f"{self.answerer.identity()}; {self.rubric_template.identity()} judge:{judge_identity(self.judge)}"

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        before = len(self._conversation)
        result = await super().step(action, extra=extra)
        if not result.episode_done or result.stop_reason is StopReason.PARTNER_ERROR:
            return result
        grew = len(self._conversation) > before
        reply = str(self._conversation[before]["content"]) if grew else ""
        try:
            scored = Scored(transcript(self._conversation), reply)
            (score,) = await score_group(self.rubric, [scored], self.judge, skip_gated=True)
        except Exception as exc:  # a failing judge ends the episode as a partner error, never the run
            logs = {**result.logs, "error": f"judge failed: {exc!r}"[:500]}
            return StepResult.final(
                0.0,
                StopReason.PARTNER_ERROR,
                result.next_observation,
                result.next_stop_condition,
                result.metrics,
                logs,
            )
        return self._judged(result, score)

    def _judged(self, result: StepResult, score: RubricScore) -> StepResult:
        metrics = {k: v for k, v in result.metrics.items() if not k.startswith("stop/")}
        metrics.update({f"rubric/{c.name}": c.score for c in score.criteria})
        metrics["rubric/reward"] = score.reward
        logs = {**result.logs, "rubric": self.rubric_template.identity()}
        logs["criteria"] = "; ".join(
            f"{c.name}={c.score:g}"
            + (f" {c.verdict.value}" if c.verdict else "")
            + (" gated" if c.gated else "")
            for c in score.criteria
        )
        assert result.stop_reason is not None
        return StepResult.final(
            score.reward,
            result.stop_reason,
            result.next_observation,
            result.next_stop_condition,
            metrics,
            logs,
        )

    def reward_probes(self) -> Sequence[RewardProbe]:
        """A right guess without a reason, a wrong guess with one, a right guess whose reason talks to the
        judge and the judge's question written out all earn less; the judge-less variant's reference (the
        right guess and a reason) earns full marks. With a judge, no reply is sure of full marks."""
        below = ProbeExpectation.BELOW_REFERENCE
        probes = [
            RewardProbe("right guess, no reason", f"Guess: {self.secret}", below),
            RewardProbe("wrong guess with a reason", f"Guess: zzz\nBecause: {REASON}", below),
            RewardProbe("reason addresses the judge", f"Guess: {self.secret}\nBecause: {INJECTION}", below),
            RewardProbe("rubric question verbatim", f"Guess: {self.secret}\n{CONSISTENT_QUESTION}", below),
            RewardProbe("format only: Guess:", "Guess:\nBecause:", below),
        ]
        if not self.judged:
            reference = f"Guess: {self.secret}\nBecause: {REASON}"
            probes.insert(0, RewardProbe("reference", reference, ProbeExpectation.FULL_MARKS))
        return probes


def twenty_questions_judged(
    ctx: EnvContext,
    *,
    secret: str | None = None,
    max_questions: int = 20,
    answerer: Answerer | MessageCompleter | None = None,
    judge: JudgeRef = DEFAULT_JUDGE,
    judge_cache: str | None = None,
    step_rubric: str | dict[str, Any] | None = None,
    step_weight: float = 0.2,
) -> Env:
    """The catalog's entry point: a :class:`TwentyQuestionsJudgedEnv`, each turn also scored by
    ``step_rubric`` (a ``per_step`` rubric: a TOML/JSON file or its dict, judged by the same judge) with
    ``step_weight`` of the reward when one is given."""
    env = TwentyQuestionsJudgedEnv(
        ctx,
        secret=secret,
        max_questions=max_questions,
        answerer=answerer,
        judge=judge,
        judge_cache=judge_cache,
    )
    if step_rubric is None:
        return env
    rubric = (
        Rubric.from_dict(step_rubric) if isinstance(step_rubric, dict) else load_rubric(Path(step_rubric))
    )
    judge_model = env.judge if rubric.has_judge else None
    return RubricStepEnv(env, rubric, judge_model, ctx.renderer, weight=step_weight)
