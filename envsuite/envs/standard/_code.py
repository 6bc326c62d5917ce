"""MBPP as a standard set: the model writes the function, MBPP's own asserts judge it in the sandbox.

Prompt: lm-evaluation-harness's MBPP text ("You are an expert Python programmer, and here is your task:
{text} Your code should pass these tests:" and the set's three asserts), zero-shot, then the code envs'
instruction (a fenced python block). Score (MBPP's, as lm-eval's ``pass_at_1``): 1 when the reply's code,
after the record's ``test_setup_code``, passes every assert of ``test_list``, run by the code envs'
judge in a fresh sandbox (envsuite.envs.code: exits, forged output and patched graders score 0).
Reward: ``passed + format_coef * (fenced - 1)``, as the code envs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from envsuite.core import EnvContext, RewardProbe
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict
from envsuite.envs.code import CODE_INSTRUCTION, DEFAULT_LIMITS, CheckSuite, extract_code, run_check
from envsuite.envs.code._probes import ProbeTarget, code_probes
from envsuite.envs.standard._items import BenchedInOrder, StandardSetError, load_records
from envsuite.envs.standard._sets import BY_NAME
from envsuite.grading import GradeOutcome, GradeResult, GraderUnavailableError
from envsuite.sandbox import Limit, SandboxConfig, SandboxUnavailableError

MBPP_TEMPLATE = "You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:\n\n{tests}"
"""lm-evaluation-harness's MBPP prompt text (its few-shot examples and ``[BEGIN]`` marker left out)."""
_CALLED = re.compile(r"assert\s+\(?\s*([A-Za-z_]\w*)\s*\(")


class StandardCodeEnv(BenchedInOrder, ProblemEnv):
    """One MBPP problem (``standard/mbpp``); ``item`` by index, else ``seed % n``; ``data_file`` as
    :class:`StandardSetEnv`'s."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        name: str = "mbpp",
        item: int | None = None,
        data_file: str | None = None,
        timeout_s: float = DEFAULT_LIMITS.wall_s,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``timeout_s``: wall and CPU seconds of the test run."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if name not in BY_NAME:
            raise ValueError(f"unknown standard set {name!r}; known: {sorted(BY_NAME)}")
        self.standard = BY_NAME[name]
        records = load_records(self.standard, data_file)
        index = ctx.seed % len(records) if item is None else item
        if not 0 <= index < len(records):
            raise ValueError(f"item must be in 0..{len(records) - 1}, got {index}")
        record = records[index]
        missing = [f for f in self.standard.fields if f not in record]
        if missing:
            raise StandardSetError(
                f"{self.standard.title} record {index} lacks the upstream fields {missing}"
            )
        self.tests = [str(t) for t in record["test_list"]]
        called = _CALLED.search(self.tests[0]) if self.tests else None
        if called is None:
            raise StandardSetError(
                f"{self.standard.title} record {index}: no function call in its first assert"
            )
        self.function = called.group(1)
        self.setup = str(record.get("test_setup_code") or "")
        self.reference_code = str(record["code"])
        self.prompt = (
            MBPP_TEMPLATE.format(text=record["text"], tests="\n".join(self.tests)) + f"\n\n{CODE_INSTRUCTION}"
        )
        self.problem = Problem(question=self.prompt, answer=f"MBPP/{record['task_id']}")
        self.limits = DEFAULT_LIMITS.with_time(timeout_s)

    def suite(self) -> CheckSuite:
        """MBPP's asserts as a ``check(candidate)`` (they call the function by its name)."""
        body = "\n".join(f"    {line}" for test in self.tests for line in test.splitlines())
        return CheckSuite(
            entry_point=self.function, setup=self.setup, test=f"def check(candidate):\n{body}\n"
        )

    def program(self, code: str) -> str:
        """The candidate as MBPP's harness runs it: the record's ``test_setup_code``, then the code."""
        return f"{self.setup}\n{code}" if self.setup.strip() else code

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference solution, an honest wrong one, and every attack on the grader (docs/code.md)."""
        junk = f"def {self.function}(*args, **kwargs):\n    return None\n"
        return code_probes(ProbeTarget(self.function, self.reference_code, junk))

    async def check(self, reply: str) -> Verdict:
        extracted = extract_code(reply)
        if extracted is None:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no code in the reply"), False, None)
        try:
            report = await asyncio.to_thread(
                run_check,
                self.program(extracted.code),
                self.suite(),
                limits=self.limits,
                config=SandboxConfig(),
            )
        except SandboxUnavailableError as exc:
            raise GraderUnavailableError(str(exc)) from exc
        timed_out = report.limit in (Limit.WALL_TIME, Limit.CPU_TIME)
        outcome = (
            GradeOutcome.CORRECT
            if report.all_passed
            else GradeOutcome.TIMEOUT
            if timed_out
            else GradeOutcome.WRONG
        )
        detail = "passed" if report.all_passed else report.failure
        return Verdict(GradeResult(outcome, detail), extracted.fenced, extracted.code)
