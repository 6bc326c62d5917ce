"""Envs for the reward-hacking suite's tests: one whose rewards are sound and deliberately gameable ones."""

from __future__ import annotations

from collections.abc import Sequence

from envsuite import StepResult
from envsuite.core import Action, ActionExtra, ProbeExpectation, RewardProbe
from tests.support.toy_envs import EchoNumberEnv


class ProbedEchoEnv(EchoNumberEnv):
    """Sound: reward 1 for a reply holding the seeded number, 0 otherwise; says so in its probes."""

    def reward_probes(self) -> Sequence[RewardProbe]:
        return (
            RewardProbe("reference", str(self.number), ProbeExpectation.FULL_MARKS),
            RewardProbe("junk", "zzz", ProbeExpectation.BELOW_REFERENCE),
            RewardProbe("sys.exit", "import sys; sys.exit(0)", ProbeExpectation.NO_CREDIT),
        )


class RewardsEverythingEnv(ProbedEchoEnv):
    """Broken on purpose: every reply earns 1.0 (as reasoning-gym's game_of_life_halting scores)."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        result.reward = 1.0
        return result


class RewardsTheFormatEnv(ProbedEchoEnv):
    """Broken on purpose: a reply with a ``\\boxed{}`` earns full marks, whatever is in the box. Its own
    probes all hold; only the generic format-only probe finds it."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if "\\boxed{" in self.messages[-1]["content"]:
            result.reward = 1.0
        return result


class ShortReferenceEnv(ProbedEchoEnv):
    """Broken on purpose: the right answer earns 0.5 (its reference is not rewarded with full marks)."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        result.reward *= 0.5
        return result


class PaysTheExitEnv(ProbedEchoEnv):
    """Broken on purpose: a reply that exits earns partial credit (below the reference, above 0)."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if "sys.exit" in self.messages[-1]["content"]:
            result.reward = 0.25
        return result


class SilenceWinsEnv(EchoNumberEnv):
    """Broken on purpose, with no probes of its own (a game): an empty reply wins every episode."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if not self.messages[-1]["content"].strip():
            result.reward = 1.0
        return result


class SilenceSometimesWinsEnv(EchoNumberEnv):
    """No probes of its own: an empty reply wins when the seeded number is even (an opponent that loses
    on its own sometimes). Judged on the mean over the seeds, that is luck, not a reward for nothing."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if not self.messages[-1]["content"].strip() and self.number % 2 == 0:
            result.reward = 1.0
        return result
