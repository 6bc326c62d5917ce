"""An env whose first episode fails while a flag file exists (to test resuming interrupted runs)."""

from __future__ import annotations

import os
from pathlib import Path

from envsuite import EnvContext
from envsuite.core import Action, StepResult
from tests.support.toy_envs import EchoNumberEnv


class FlakyEnv(EchoNumberEnv):
    """Records every episode start; the seed named in the flag file raises while the file exists."""

    def __init__(self, ctx: EnvContext) -> None:
        super().__init__(ctx)
        with open(os.environ["ENVSUITE_TEST_FLAKY_LOG"], "a") as log:
            log.write(f"{ctx.seed}\n")

    async def step(self, action: Action) -> StepResult:
        flag = os.environ.get("ENVSUITE_TEST_FLAKY_FLAG", "")
        if flag and os.path.exists(flag) and Path(flag).read_text().strip() == str(self.ctx.seed):
            raise RuntimeError("simulated crash mid-run")
        return await super().step(action)
