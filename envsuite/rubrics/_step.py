"""Per-step scoring: a rubric that scores every assistant turn of any env (``Timing.PER_STEP``).

:class:`RubricStepEnv` wraps any :class:`~envsuite.core.Env`. After each step it scores the reply just
given (against the last user or tool message before it) with a per-step rubric, and pays the change of
the turns' running mean score as that step's reward::

    reward_t = (1 - weight) * inner_reward_t + weight * (mean(s_1..s_t) - mean(s_1..s_{t-1}))

so the episode's return is ``(1 - weight) * inner return + weight * mean turn score``: dense (each turn's
reply moves its own step's reward), bounded whatever the number of turns (an env whose range tops at 1
keeps that top), and no turn can be farmed by asking more of them. The final step's metrics carry the
mean of each criterion over the turns (``rubric_step/<criterion>``, ``rubric_step/reward``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    InitialObservationOverflow,
    Message,
    Observation,
    RewardProbe,
    StepResult,
    StopCondition,
    tokens_outside_vocabulary,
)
from envsuite.errors import UsageError
from envsuite.renderers import Renderer
from envsuite.rubrics._contract import Rubric, Timing
from envsuite.rubrics._judge import JudgeModel
from envsuite.rubrics._partner import judge_identity
from envsuite.rubrics._score import RubricScore, Scored, score_group

if TYPE_CHECKING:
    from envsuite.constraints import Constraint

STEP_METRIC_PREFIX = "rubric_step/"


@dataclass
class _Turns:
    """The per-step rubric's scores so far."""

    scores: list[RubricScore] = field(default_factory=list)

    def mean(self) -> float:
        return sum(s.reward for s in self.scores) / len(self.scores) if self.scores else 0.0

    def metrics(self) -> dict[str, float]:
        n = len(self.scores)
        if not n:
            return {}
        names = dict.fromkeys(c.name for s in self.scores for c in s.criteria)
        means = {
            f"{STEP_METRIC_PREFIX}{name}": sum(
                c.score for s in self.scores for c in s.criteria if c.name == name
            )
            / n
            for name in names
        }
        return {**means, f"{STEP_METRIC_PREFIX}reward": self.mean()}


def last_prompt(conversation: Sequence[Message]) -> str:
    """The last user or tool message of ``conversation`` (empty when there is none)."""
    return next((str(m["content"]) for m in reversed(conversation) if m["role"] in ("user", "tool")), "")


def reply_text(renderer: Renderer, action: Action) -> str:
    """The text of a sampled reply; empty for ids outside the vocabulary or a renderer that fails."""
    if tokens_outside_vocabulary(action, renderer.vocab_size) is not None:
        return ""
    try:
        return str(renderer.parse_response(list(action)).message.get("content", ""))
    except Exception:  # the renderer contract says it never raises; a broken one scores an empty reply
        return ""


class RubricStepEnv(Env):
    """``inner`` with each assistant turn scored by a ``Timing.PER_STEP`` rubric (module docstring)."""

    def __init__(
        self,
        inner: Env,
        rubric: Rubric,
        judge: JudgeModel | None,
        renderer: Renderer,
        *,
        weight: float = 0.2,
    ) -> None:
        if rubric.timing is not Timing.PER_STEP:
            raise UsageError(f"rubric {rubric.name!r} scores at {rubric.timing.value}, not per step")
        if rubric.has_judge and judge is None:
            raise UsageError(f"rubric {rubric.name!r} has judge criteria but no judge was given")
        if not 0.0 < weight <= 1.0:
            raise UsageError(f"a per-step rubric's weight must be in (0, 1], got {weight}")
        self.inner = inner
        self.rubric = rubric
        self.judge = judge
        self.renderer = renderer
        self.weight = weight
        self._turns = _Turns()

    @property
    def answerer_identity(self) -> str:
        """The inner env's partner, then this rubric and its judge (results of each never pool)."""
        inner = getattr(self.inner, "answerer_identity", "") or getattr(self.inner, "opponent_identity", "")
        own = f"step {self.rubric.identity()} judge:{judge_identity(self.judge)}"
        return f"{inner}; {own}" if inner else own

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        return await self.inner.initial_observation()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        prompt = last_prompt(self.inner.conversation())
        result = await self.inner.step(action, extra=extra)
        before = self._turns.mean()
        logs = dict(result.logs)
        try:
            scored = Scored(prompt, reply_text(self.renderer, action))
            (score,) = await score_group(self.rubric, [scored], self.judge, skip_gated=True)
        except Exception as exc:  # a failing judge scores the turn 0 and says why; the episode goes on
            score = RubricScore(0.0, ())
            logs["rubric_step_error"] = repr(exc)[:500]
        self._turns.scores.append(score)
        reward = (1.0 - self.weight) * result.reward + self.weight * (self._turns.mean() - before)
        metrics = {**result.metrics, **(self._turns.metrics() if result.episode_done else {})}
        return dataclasses.replace(result, reward=reward, metrics=metrics, logs=logs)

    def conversation(self) -> list[Message]:
        return self.inner.conversation()

    def action_constraint(self) -> Constraint | None:
        return self.inner.action_constraint()

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The inner env's probes: its reference earns full marks only when every turn of it also
        satisfies the per-step rubric."""
        return self.inner.reward_probes()

    @property
    def turn_scores(self) -> list[RubricScore]:
        """The per-step rubric's score of each turn so far."""
        return list(self._turns.scores)
