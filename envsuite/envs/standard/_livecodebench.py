"""LiveCodeBench (code generation) as a standard set: the model writes a program, LCB's tests judge it.

Records are ``livecodebench/code_generation_lite``'s: ``question_content``, ``starter_code``, the tests
as JSON (``public_test_cases``; ``private_test_cases`` in the release files as base64 of zlib of a
pickled JSON string) and ``metadata`` (``func_name`` for LeetCode's functional problems).

Prompt: LCB's generic one (``lcb_runner/prompts/code_generation.py``, LiveCodeBench commit 28fef95):
its system message, then ``### Question:``, the ``### Format:`` instruction (with the starter code, or
stdin/stdout and a ``# YOUR CODE HERE`` block) and ``### Answer: (use the provided format with
backticks)``. Score (``lcb_runner/evaluation/testing_util.py``): 1 when the reply's code passes every
public and private test, run in envsuite's sandbox after LCB's import header:

* **functional** (``func_name`` in the metadata): each input is lines of JSON arguments; the method of
  ``Solution()`` (or the module's function when the code has no ``class Solution``) is called by the
  code envs' judge and the value it returns is compared here, outside, with the JSON output (a tuple
  counts as a list, as in LCB).
* **stdin**: the program runs on the test's input; its output and the expected one are compared line
  by line after stripping, and lines that differ must both parse as whitespace-separated decimals
  and be equal as decimals (LCB's ``grade_stdio``); an uncaught exception fails the test.

Limits: LCB's 6 s per test (the functional run gets LCB's overall bound, ``(6 + 1) * tests + 5`` s).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import pickle
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from envsuite.core import EnvContext, RewardProbe
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict
from envsuite.envs.code import DEFAULT_LIMITS, TestReport, extract_code, run_cases
from envsuite.envs.code._probes import ProbeTarget, code_probes
from envsuite.envs.standard._items import BenchedInOrder, StandardSetError, load_records
from envsuite.envs.standard._sets import BY_NAME
from envsuite.grading import GradeOutcome, GradeResult, GraderUnavailableError
from envsuite.sandbox import Limit, Limits, Sandbox, SandboxConfig, SandboxUnavailableError

LCB_SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests."
)
"""LCB's ``PromptConstants.SYSTEM_MESSAGE_GENERIC``."""
LCB_FORMAT_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters."
)
LCB_FORMAT_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
    "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)
LCB_IMPORTS = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
)
"""LCB's ``import_string``: put before every candidate, as its harness does."""
LCB_TIMEOUT_S = 6.0
ENTRY = "lcb_entry"
"""The function the judge calls in a functional problem (it calls the problem's method)."""
_OUTPUT_BYTES = 16 << 20


class _NoGlobals(pickle.Unpickler):
    """Unpickles plain data only: the release files pickle a JSON string, nothing that names a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def decode_tests(field: str) -> list[dict[str, str]]:
    """A test-case field: JSON, or (``private_test_cases`` in the release files) base64 of zlib of a
    pickled JSON string, read as LCB's ``CodeGenerationProblem`` reads it but without running any pickle
    code."""
    try:
        tests = json.loads(field)
    except ValueError:
        try:
            raw = zlib.decompress(base64.b64decode(field.encode("utf-8")))
            text = _NoGlobals(io.BytesIO(raw)).load()
            tests = json.loads(text)
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as exc:
            raise StandardSetError(
                f"a test-case field is neither JSON nor LCB's compressed form: {exc}"
            ) from exc
    if not isinstance(tests, list):
        raise StandardSetError("a test-case field is not a list of tests")
    return [{"input": str(t["input"]), "output": str(t["output"])} for t in tests]


def lcb_prompt(question: str, starter_code: str) -> str:
    """LCB's ``get_generic_question_template_answer``."""
    prompt = f"### Question:\n{question}\n\n"
    if starter_code:
        prompt += f"### Format: {LCB_FORMAT_WITH_STARTER}\n```python\n{starter_code}\n```\n\n"
    else:
        prompt += f"### Format: {LCB_FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return prompt + "### Answer: (use the provided format with backticks)\n\n"


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(word) for word in line.split()]
    except InvalidOperation:
        return None


def stdio_matches(got: str, expected: str) -> bool:
    """LCB's ``grade_stdio`` comparison of a program's output with a test's."""
    got_lines, expected_lines = _stripped_lines(got), _stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for line, want in zip(got_lines, expected_lines, strict=True):
        if line == want:
            continue
        got_numbers, want_numbers = _decimals(line), _decimals(want)
        if got_numbers is None or want_numbers is None or got_numbers != want_numbers:
            return False
    return True


def run_stdin_tests(
    program: str, tests: Sequence[Mapping[str, str]], *, limits: Limits, config: SandboxConfig | None = None
) -> TestReport:
    """Run ``program`` on each test's input in one fresh sandbox, stopping at the first failure."""
    wall, isolated = 0.0, True
    with Sandbox(config) as box:
        box.write_bytes("solution.py", program.encode("utf-8", "surrogatepass"))
        for number, test in enumerate(tests):
            run = box.run([box.config.python, "-I", "solution.py"], stdin=test["input"], limits=limits)
            wall, isolated = wall + run.wall_s, isolated and run.isolated
            failure = ""
            if run.limit is not Limit.NONE:
                failure = f"stopped by the {run.limit.value.replace('_', ' ')} limit"
            elif run.exit_code != 0 and "Traceback (most recent call last)" in run.stderr:
                failure = "raised " + (run.stderr.strip().splitlines() or ["?"])[-1][:300]
            elif not stdio_matches(run.stdout, test["output"]):
                failure = (
                    f"wrong output: {run.stdout.strip()[:200]!r}, expected {test['output'].strip()[:200]!r}"
                )
            if failure:
                return TestReport(
                    number, len(tests), run.limit, f"test {number + 1}: {failure}", isolated, wall
                )
    return TestReport(len(tests), len(tests), Limit.NONE, "", isolated, wall)


@dataclass(frozen=True)
class LcbProblem:
    """One LiveCodeBench problem as the env runs it."""

    question_id: str
    prompt: str
    tests: tuple[dict[str, str], ...]
    """The public tests, then the private ones."""
    func_name: str | None
    """The method a functional problem's tests call; None for stdin problems."""
    cases: tuple[tuple[list[Any], Any], ...] = ()
    """A functional problem's tests as (arguments, expected value), each line of an input one argument."""


def lcb_problem(record: Mapping[str, Any], index: int) -> LcbProblem:
    """The prompt and tests of an upstream record."""
    metadata = record["metadata"]
    meta = json.loads(metadata) if isinstance(metadata, str) else dict(metadata or {})
    tests = decode_tests(str(record["public_test_cases"])) + decode_tests(str(record["private_test_cases"]))
    if not tests:
        raise StandardSetError(f"LiveCodeBench record {index} has no tests")
    starter = str(record.get("starter_code") or "")
    func_name = str(meta["func_name"]) if meta.get("func_name") else None
    try:
        cases = tuple(
            ([json.loads(line) for line in t["input"].split("\n")], json.loads(t["output"]))
            for t in (tests if func_name else ())
        )
    except ValueError as exc:
        raise StandardSetError(
            f"LiveCodeBench record {index}: a functional test is not JSON lines ({exc})"
        ) from exc
    return LcbProblem(
        str(record.get("question_id") or index),
        lcb_prompt(str(record["question_content"]), starter),
        tuple(tests),
        func_name,
        cases,
    )


class LiveCodeBenchEnv(BenchedInOrder, ProblemEnv):
    """One LiveCodeBench problem (``standard/livecodebench``); ``item`` by index, else ``seed % n``;
    ``data_file`` a JSONL of ``code_generation_lite`` records. Reward ``passed + format_coef * (fenced -
    1)``, as the code envs and MBPP."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        name: str = "livecodebench",
        item: int | None = None,
        data_file: str | None = None,
        timeout_s: float = LCB_TIMEOUT_S,
        system_prompt: str | None = LCB_SYSTEM_MESSAGE,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``timeout_s``: seconds per test (LCB's 6)."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=format_coef)
        if name != "livecodebench":
            raise ValueError(f"{name!r} is not LiveCodeBench")
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
        self.lcb = lcb_problem(record, index)
        self.prompt = self.lcb.prompt
        self.problem = Problem(question=self.prompt, answer=f"LiveCodeBench/{self.lcb.question_id}")
        self.timeout_s = timeout_s

    def program(self, code: str) -> str:
        """The candidate as LCB's harness runs it: its import header first (and, for a functional
        problem, the entry the judge calls, which any definition of the candidate's own replaces)."""
        if self.lcb.func_name is None:
            return f"{LCB_IMPORTS}\n{code}"
        target = "Solution()" if "class Solution" in code else "None"
        entry = (
            f"_lcb_target = []\n\n\ndef {ENTRY}(*args):\n    if not _lcb_target:\n"
            f"        _lcb_target.append({target})\n"
            f"    holder = _lcb_target[0]\n"
            f"    method = globals()[{self.lcb.func_name!r}] if holder is None else holder.{self.lcb.func_name}\n"
            f"    return method(*args)\n"
        )
        return f"{LCB_IMPORTS}\n\n{entry}\n\n{code}"

    def run_tests(self, code: str) -> TestReport:
        """The candidate against every test, in the sandbox (blocking)."""
        program = self.program(code)
        limits = DEFAULT_LIMITS.with_time(self.timeout_s + 1).with_output(_OUTPUT_BYTES)
        if self.lcb.func_name is None:
            return run_stdin_tests(program, self.lcb.tests, limits=limits, config=SandboxConfig())
        cases = self.lcb.cases
        overall = DEFAULT_LIMITS.with_time((self.timeout_s + 1) * len(cases) + 5).with_output(_OUTPUT_BYTES)
        return run_cases(program, ENTRY, cases, limits=overall, config=SandboxConfig())

    def reward_probes(self) -> Sequence[RewardProbe]:
        """A wrong program and every attack on the grader (the records hold no reference solution, so the
        checker has no full-marks probe; tests/test_standard_sets.py scores correct programs)."""
        if self.lcb.func_name is None:
            junk = "print(0)\n"
        else:
            junk = f"class Solution:\n    def {self.lcb.func_name}(self, *args):\n        return None\n"
        outputs = [t["output"] for t in self.lcb.tests]
        probes = code_probes(ProbeTarget(ENTRY, "", junk, outputs if self.lcb.func_name is None else ()))
        return tuple(p for p in probes if p.name != "reference")

    async def check(self, reply: str) -> Verdict:
        extracted = extract_code(reply)
        if extracted is None:
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no code in the reply"), False, None)
        try:
            report = await asyncio.to_thread(self.run_tests, extracted.code)
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
        detail = f"passed {report.passed}/{report.total}" if report.all_passed else report.failure
        return Verdict(GradeResult(outcome, detail), extracted.fenced, extracted.code)
