"""A slow env that logs episode starts and ends (to test resuming a killed benchmark run)."""

from __future__ import annotations

import asyncio
import os

from envsuite import EnvContext
from envsuite.core import Action, ActionExtra, StepResult, StopReason
from tests.support.toy_envs import EchoNumberEnv


def _log(event: str, seed: int) -> None:
    with open(os.environ["ENVSUITE_TEST_EPISODE_LOG"], "a") as log:
        log.write(f"{event} {seed}\n")


class SlowEnv(EchoNumberEnv):
    """Each step takes ``ENVSUITE_TEST_STEP_SECONDS`` (default 0)."""

    def __init__(self, ctx: EnvContext) -> None:
        super().__init__(ctx)
        _log("start", ctx.seed)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        await asyncio.sleep(float(os.environ.get("ENVSUITE_TEST_STEP_SECONDS", "0")))
        result = await super().step(action, extra=extra)
        _log("done", self.ctx.seed)
        return result


class RaisingStepEnv(EchoNumberEnv):
    """Raises in every step: a failing env must become a scored env_error, not a crashed run."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        raise RuntimeError("env exploded")


class EndlessEnv(EchoNumberEnv):
    """Never ends by itself: every turn takes 0.2 s and earns 1 (to test the bench's episode bound)."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        await asyncio.sleep(0.2)
        return StepResult(1.0, False, self.prompt, self.ctx.renderer.get_stop_sequences(), {}, {})


class BuggyEnv(EchoNumberEnv):
    """Fails with a bug of its own when made (an IndexError, not a user's mistake)."""

    def __init__(self, ctx: EnvContext) -> None:
        raise IndexError("pop from an empty deque")


class CoinEnv(EchoNumberEnv):
    """Succeeds when the sampled reply's token ids sum to an odd number: a coin each play of an episode
    flips anew (its sampling seed differs), so a problem's plays have varied, known successes."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        heads = float(sum(action) % 2 == 1)
        return StepResult.final(
            reward=heads,
            stop_reason=StopReason.COMPLETED,
            next_observation=result.next_observation,
            next_stop_condition=result.next_stop_condition,
            metrics={"correct": heads},
        )
