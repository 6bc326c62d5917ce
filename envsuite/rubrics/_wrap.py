"""A rubric attached to any env: a group builder whose group rewards are the rubric's scores.

:class:`RubricGroupBuilder` wraps any :class:`~envsuite.core.EnvGroupBuilder` (from
``envsuite.make_group_builder(ID, ...)``): the env plays as it always does, and once the group finished
the final assistant reply of every member is scored by the rubric in one judge batch, its reward added
to the env's own group reward. Its :meth:`identity` and logging tags carry the rubric's hash and the
judge's identity, so a run records exactly which rubric and judge scored it.
"""

from __future__ import annotations

from collections.abc import Sequence

from envsuite.core import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory
from envsuite.renderers import Renderer
from envsuite.rubrics._contract import Rubric
from envsuite.rubrics._judge import JudgeModel
from envsuite.rubrics._score import Scored, score_group


class RubricGroupBuilder(EnvGroupBuilder):
    """``inner``'s envs, rewarded at the end of the trajectory by ``rubric`` (judged by ``judge``)."""

    def __init__(
        self, inner: EnvGroupBuilder, rubric: Rubric, judge: JudgeModel | None, renderer: Renderer
    ) -> None:
        self.inner = inner
        self.rubric = rubric
        self.judge = judge
        self.renderer = renderer

    def identity(self) -> str:
        judge = self.judge.identity() if self.judge else "none"
        return f"{self.rubric.identity()}, judge={judge}"

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    def _scored(self, trajectory: Trajectory) -> Scored:
        if not trajectory.transitions:
            return Scored("", "")
        last = trajectory.transitions[-1]
        prompt = self.renderer.tokenizer.decode(last.ob.to_ints(), skip_special_tokens=True)
        reply = self.renderer.parse_response(list(last.ac.tokens)).message["content"]
        return Scored(prompt, reply)

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        own = await self.inner.compute_group_rewards(trajectory_group, env_group)
        scores = await score_group(self.rubric, [self._scored(t) for t in trajectory_group], self.judge)
        out: list[tuple[float, Metrics]] = []
        for (reward, metrics), score in zip(own, scores, strict=True):
            extra: Metrics = {f"rubric/{c.name}": c.score for c in score.criteria}
            out.append((reward + score.reward, {**metrics, **extra, "rubric/reward": score.reward}))
        return out

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return [*self.inner.logging_tags(), self.rubric.identity()]


class RubricDataset(RLDataset):
    """``inner``'s batches with every group builder wrapped in a :class:`RubricGroupBuilder` (a
    training run's ``rubric``: the same rubric and judge score every group, train and held-out)."""

    def __init__(
        self, inner: RLDataset, rubric: Rubric, judge: JudgeModel | None, renderer: Renderer
    ) -> None:
        self.inner = inner
        self.rubric = rubric
        self.judge = judge
        self.renderer = renderer

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [
            RubricGroupBuilder(builder, self.rubric, self.judge, self.renderer)
            for builder in self.inner.get_batch(index)
        ]

    def __len__(self) -> int:
        return len(self.inner)
