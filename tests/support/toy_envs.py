"""Small envs used by the registry, checker and gym tests (a good one and deliberately broken ones)."""

from __future__ import annotations

import random

import tinker

from envsuite import EnvContext, InitialObservationOverflow, Message, StepResult, StopReason
from envsuite.core import Action, ActionExtra, Env, StopCondition


class EchoNumberEnv(Env):
    """Asks the policy to repeat a seeded number; reward 1 when the reply contains it."""

    def __init__(self, ctx: EnvContext, *, low: int = 0, high: int = 99) -> None:
        self.ctx = ctx
        self.number = random.Random(ctx.seed).randint(low, high)
        self.messages: list[Message] = [{"role": "user", "content": f"Repeat this number: {self.number}"}]

    async def initial_observation(
        self,
    ) -> tuple[tinker.ModelInput, StopCondition] | InitialObservationOverflow:
        prompt = self.ctx.renderer.build_generation_prompt(self.messages)
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self.prompt = prompt
        return prompt, self.ctx.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        parsed = self.ctx.renderer.parse_response(action)
        self.messages.append(parsed.message)
        correct = str(self.number) in parsed.message["content"]
        reason = StopReason.COMPLETED if parsed.clean_stop else StopReason.MAX_TOKENS
        return StepResult.final(
            reward=float(correct),
            stop_reason=reason,
            next_observation=self.prompt.append(tinker.EncodedTextChunk(tokens=list(action))),
            next_stop_condition=self.ctx.renderer.get_stop_sequences(),
            metrics={"correct": float(correct)},
        )

    def conversation(self) -> list[Message]:
        return list(self.messages)


class GlobalRandomEnv(EchoNumberEnv):
    """Broken on purpose: draws its number from the global RNG, so seeds do not determine episodes."""

    def __init__(self, ctx: EnvContext) -> None:
        super().__init__(ctx)
        self.number = random.randint(0, 10**9)
        self.messages = [{"role": "user", "content": f"Repeat this number: {self.number}"}]


class RaisingEnv(EchoNumberEnv):
    """Broken on purpose: raises on an empty action instead of returning a parse error."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if not action:
            raise ValueError("empty action")
        return await super().step(action, extra=extra)


class NoStopReasonEnv(EchoNumberEnv):
    """Broken on purpose: ends episodes without a stop reason."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        return StepResult(result.reward, True, result.next_observation, result.next_stop_condition)


class ReportsEnvErrorEnv(EchoNumberEnv):
    """Broken on purpose: every episode ends in ``env_error`` (as a wrapper that swallows a crash would)."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        return StepResult.final(
            0.0,
            StopReason.ENV_ERROR,
            result.next_observation,
            result.next_stop_condition,
            logs={"error": "boom"},
        )


class SometimesEnvErrorEnv(EchoNumberEnv):
    """Broken on purpose: episodes with an odd number end in ``env_error``."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if self.number % 2 == 0:
            return result
        return StepResult.final(
            0.0,
            StopReason.ENV_ERROR,
            result.next_observation,
            result.next_stop_condition,
            logs={"error": "odd"},
        )


class OldCookbookParseEnv(EchoNumberEnv):
    """A cookbook env written for a renderer whose ``parse_response`` returned something else: every step raises."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        _message, _ok, _extra_field = self.ctx.renderer.parse_response(action)  # type: ignore[misc]
        raise AssertionError("unreachable: a ParsedResponse unpacks into two values")


class UnrecordableEnv(EchoNumberEnv):
    """Plays like EchoNumberEnv, but once over its conversation holds bytes, which no journal or log can
    store: a plugin env returning odd data must not end a whole-catalog bench."""

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        self.over = True
        return await super().step(action, extra=extra)

    def conversation(self) -> list[Message]:
        if not getattr(self, "over", False):
            return super().conversation()
        return [*self.messages, {"role": "user", "content": b"\x00raw"}]  # type: ignore[typeddict-item]
