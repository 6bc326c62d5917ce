"""``code_feedback``: write a function, see the failing test, revise (a turn budget).

The shape of tinker-cookbook's ``code_rl`` tool loop and SWE-style envs: each reply is run against the
hidden tests in the sandbox; when one fails, the next user message shows it (the call, what came back,
what was expected, or the error), and the model answers with the whole function again. The episode
ends when every test passes (``completed``) or after ``max_turns`` replies (``max_turns``).

Reward, on the final step only: the last reply's score (fraction of tests passed, or 1 when all pass)
``+ format_coef * (fenced - 1)``, minus ``turn_penalty`` for each reply before the last (so passing at
once beats passing after revisions). Unreadable, cut-off or code-less replies use up a turn and are
told why. Metrics: ``correct``, ``tests_passed``, ``turns``, ``format``, ``sandbox_limit``, ``isolated``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Logs,
    Message,
    Metrics,
    Observation,
    RewardProbe,
    StepResult,
    StopCondition,
    StopReason,
)
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, clip
from envsuite.envs.code._grading import DEFAULT_LIMITS, TestReport, extract_code, run_cases
from envsuite.envs.code._probes import code_probes
from envsuite.envs.code._single import CODE_INSTRUCTION, task_probe_target
from envsuite.envs.code._tasks import CodeTask, draw_task
from envsuite.sandbox import Limit, SandboxConfig, SandboxUnavailableError

DEFAULT_MAX_TURNS = 3


class CodeFeedbackEnv(Env):
    """A procedural task over several turns, with the failing test shown after each wrong reply."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        rung: int = 0,
        max_turns: int = DEFAULT_MAX_TURNS,
        timeout_s: float = DEFAULT_LIMITS.wall_s,
        turn_penalty: float = 0.05,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``rung``: task difficulty (0-2); ``max_turns``: replies allowed (>= 1); ``timeout_s``: wall and
        CPU seconds of one test run; ``turn_penalty``: subtracted per reply before the last."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not timeout_s > 0 or turn_penalty < 0 or format_coef < 0:
            raise ValueError("timeout_s must be > 0, turn_penalty and format_coef >= 0")
        self.ctx = ctx
        self.max_turns = max_turns
        self.limits = DEFAULT_LIMITS.with_time(timeout_s)
        self.turn_penalty = turn_penalty
        self.format_coef = format_coef
        self.task: CodeTask = draw_task(random.Random(ctx.seed), rung, ctx.split)
        system: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        prompt = f"Write this Python function:\n\n{self.task.stub()}\n{CODE_INSTRUCTION}"
        self._conversation: list[Message] = [*system, {"role": "user", "content": prompt}]
        self._prompt: Observation | None = None
        self._turns = 0

    @property
    def stop_condition(self) -> StopCondition:
        return self.ctx.renderer.get_stop_sequences()

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference solution, an honest wrong one, and every attack on the grader (docs/code.md)."""
        return code_probes(task_probe_target(self.task))

    def conversation(self) -> list[Message]:
        return list(self._conversation)

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        prompt = self.ctx.renderer.build_generation_prompt(self._conversation)
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt = prompt
        return prompt, self.stop_condition

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self._prompt is None:
            raise RuntimeError("call initial_observation() before step()")
        self._turns += 1
        try:
            parsed = self.ctx.renderer.parse_response(list(action))
        except Exception:  # the renderer contract says it never raises; a broken one must not crash a run
            parsed = None
        text = parsed.message.get("content", "") if parsed is not None else ""
        reply: Message = {"role": "assistant", "content": text}
        if parsed is None or not parsed.valid_utf8 or not text.strip():
            return self._after(action, reply, None, False, "I could not read a reply.")
        if not parsed.clean_stop:
            return self._after(action, reply, None, False, "Your reply was cut off before it ended.")
        extracted = extract_code(text)
        if extracted is None:
            return self._after(action, reply, None, False, "I found no code in your reply.")
        try:
            report = await asyncio.to_thread(
                run_cases, extracted.code, self.task.function, self.task.cases, limits=self.limits,
                config=SandboxConfig(),
            )  # fmt: skip
        except SandboxUnavailableError as exc:
            return self._unavailable(action, reply, str(exc))
        return self._after(action, reply, report, extracted.fenced, "")

    def _after(
        self, action: Action, reply: Message, report: TestReport | None, fenced: bool, problem: str
    ) -> StepResult:
        """Finish (all passed, or no turns left) or show the failure and continue."""
        done = report is not None and report.all_passed
        if done or self._turns >= self.max_turns:
            stop = StopReason.COMPLETED if done else StopReason.MAX_TURNS
            return self._final(action, reply, report, fenced, stop)
        if report is not None:
            problem = f"{report.passed} of {report.total} tests passed. {report.failure}".strip()
        left = self.max_turns - self._turns
        feedback = (
            f"{problem}\nFix the function ({left} {'tries' if left > 1 else 'try'} left). {CODE_INSTRUCTION}"
        )
        observation = self._extend(action, reply, feedback)
        if observation.length > self.ctx.max_context_tokens:
            return self._final(action, None, report, fenced, StopReason.CONTEXT_OVERFLOW, observation)
        self._prompt = observation
        logs: Logs = {"reply": clip(str(reply.get("content", ""))), "feedback": clip(problem, 500)}
        return StepResult(0.0, False, observation, self.stop_condition, {}, logs)

    def _extend(self, action: Action, reply: Message | None, feedback: str | None) -> Observation:
        assert self._prompt is not None
        if reply is not None:
            self._conversation.append(reply)
        if feedback:
            self._conversation.append({"role": "user", "content": feedback})
        return self.ctx.renderer.build_next_prompt(self._prompt, list(action), self._conversation)

    def _final(
        self,
        action: Action,
        reply: Message | None,
        report: TestReport | None,
        fenced: bool,
        stop: StopReason,
        observation: Observation | None = None,
    ) -> StepResult:
        observation = observation or self._extend(action, reply, None)
        score = report.fraction if report is not None else 0.0
        reward = score + self.format_coef * (float(fenced) - 1.0) - self.turn_penalty * (self._turns - 1)
        reward = max(-1.0, reward)  # many turns at a high penalty stay inside the declared range
        logs: Logs = {
            "function": self.task.function,
            "tests": report.failure if report is not None else "no code",
        }
        return StepResult.final(
            reward, stop, observation, self.stop_condition, self._metrics(report, fenced), logs
        )

    def _unavailable(self, action: Action, reply: Message, why: str) -> StepResult:
        observation = self._extend(action, reply, None)
        logs: Logs = {"error": f"sandbox unavailable: {why}"[:500]}
        metrics = self._metrics(None, False)
        return StepResult.final(0.0, StopReason.ENV_ERROR, observation, self.stop_condition, metrics, logs)

    def _metrics(self, report: TestReport | None, fenced: bool) -> Metrics:
        return {
            "correct": float(report is not None and report.all_passed),
            "tests_passed": report.fraction if report is not None else 0.0,
            "turns": self._turns,
            "format": float(fenced),
            "sandbox_limit": float(report is not None and report.limit is not Limit.NONE),
            "isolated": float(report.isolated) if report is not None else 1.0,
        }
