"""``workspace/repo``: a generated small Python project with a failing test, a bug named in an issue, or a
missing feature; its hidden test suite is the reward.

Each seed builds a package ``textkit`` (``textkit/core.py`` holding three functions drawn from a pool),
its visible tests (``tests/test_core.py``, stdlib ``unittest``; ``python3 -m unittest`` runs them) and an
``ISSUE.md``. One function is the target:

* rung 0: it has a bug that a visible test catches (the issue names the failing test);
* rung 1: it has a bug that the visible tests miss (the issue describes the wrong behaviour);
* rung 2: it is a stub (``raise NotImplementedError``) and the issue describes the feature.

The hidden suite is cases on every function of the module (new inputs for the target, regressions
for the others) with the expected values computed here from the reference implementations. It never
enters the workspace: after the episode ``textkit/core.py`` is read out and run against it by the code
envs' grader (:func:`envsuite.envs.code.run_cases`: a fresh sandbox, values compared as data on the
host, a signed verdict), so editing the visible tests, special-casing their inputs, exiting early or
returning objects that claim equality earn nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.core import EnvContext, ProbeExpectation, ToolCall
from envsuite.envs._problem import draw_for_split
from envsuite.envs.code import run_cases
from envsuite.envs.tool_use import Score
from envsuite.envs.workspace._env import Attack, WorkspaceEnv, WorkspaceTask, call
from envsuite.envs.workspace._session import WorkspaceSession
from envsuite.sandbox import SandboxError

MODULE = "textkit/core.py"
TESTS = "tests/test_core.py"
_WORDS = ("alpha", "beta", "Gamma", "delta", "Echo", "fox", "golf", "hotel", "India", "jazz", "kilo")


@dataclass(frozen=True)
class Function:
    """One function of the pool: its code, a buggy version, what the issue says, and its inputs."""

    name: str
    doc: str
    good: str
    bad: str
    bug: str
    """What is wrong, as a user reports it (rung 1's issue)."""
    reference: Callable[..., Any]
    inputs: Callable[[random.Random], tuple[Any, ...]]
    visible: tuple[tuple[Any, ...], ...]
    """Inputs of the visible tests; the first catches the bug, the others do not."""


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _dedupe(items: list[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _counts(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for word in text.lower().split():
        out[word] = out.get(word, 0) + 1
    return out


def _words(rng: random.Random, low: int, high: int) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]


POOL: tuple[Function, ...] = (
    Function(
        "slugify",
        "Lowercase text with every run of other characters than a-z and 0-9 turned into one '-', and no '-' at either end.",
        "    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')",
        "    return re.sub(r'[^a-z0-9]+', '-', text.lower())",
        "slugify keeps a '-' at the ends: slugify('  Hello, World! ') gives '-hello-world-' instead of 'hello-world'",
        _slug,
        lambda r: (rng_text(r, edges=True),),
        (("  Hello, World! ",), ("abc",), ("a b",)),
    ),
    Function(
        "median",
        "The median of a non-empty list of numbers (the mean of the two middle ones for an even count).",
        "    s = sorted(values)\n    m = len(s) // 2\n    return float(s[m]) if len(s) % 2 else (s[m - 1] + s[m]) / 2",
        "    s = sorted(values)\n    return float(s[len(s) // 2])",
        "median of an even number of values is wrong: median([1, 2, 3, 4]) gives 3.0 instead of 2.5",
        _median,
        lambda r: ([r.randint(-50, 50) for _ in range(r.choice((2, 4, 6, 3, 5)))],),
        (([1, 2, 3, 4],), ([5],), ([3, 1, 2],)),
    ),
    Function(
        "chunks",
        "The list cut into consecutive lists of `size` items; the last one holds what is left.",
        "    return [items[i:i + size] for i in range(0, len(items), size)]",
        "    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]",
        "chunks drops the last, shorter chunk: chunks([1, 2, 3], 2) gives [[1, 2]] instead of [[1, 2], [3]]",
        _chunks,
        lambda r: (list(range(r.randint(1, 12))), r.randint(2, 5)),
        (([1, 2, 3], 2), ([1, 2], 1), ([1, 2, 3, 4], 2)),
    ),
    Function(
        "dedupe",
        "The items without repeats, each kept at its first position.",
        "    return list(dict.fromkeys(items))",
        "    return list(reversed(list(dict.fromkeys(reversed(items)))))",
        "dedupe keeps each item at its last position: dedupe([1, 2, 1, 3]) gives [2, 1, 3] instead of [1, 2, 3]",
        _dedupe,
        lambda r: ([r.randint(0, 5) for _ in range(r.randint(3, 10))],),
        (([1, 2, 1, 3],), ([4, 4],), ([1, 2, 3],)),
    ),
    Function(
        "word_counts",
        "How often each word of the text occurs, words compared without case (keys in lowercase).",
        "    out = {}\n    for w in text.lower().split():\n        out[w] = out.get(w, 0) + 1\n    return out",
        "    out = {}\n    for w in text.split():\n        out[w] = out.get(w, 0) + 1\n    return out",
        "word_counts is case-sensitive: word_counts('Go go') gives {'Go': 1, 'go': 1} instead of {'go': 2}",
        _counts,
        lambda r: (" ".join(_words(r, 2, 9)),),
        (("Go go",), ("a b a",), ("x",)),
    ),
)


def rng_text(rng: random.Random, *, edges: bool) -> str:
    words = _words(rng, 1, 4)
    seps = [rng.choice((" ", ", ", "--", "! ", "_")) for _ in words]
    body = "".join(w + s for w, s in zip(words, seps, strict=True))
    return (rng.choice((" ", "*", "")) + body) if edges else body


@dataclass(frozen=True)
class RepoProblem:
    rung: int
    functions: tuple[Function, ...]
    target: Function
    hidden: tuple[tuple[str, tuple[tuple[Any, ...], Any]], ...]
    """(function, (args, expected)) cases of the hidden suite."""
    task: WorkspaceTask


def module_source(functions: Sequence[Function], target: Function | None, rung: int) -> str:
    """``textkit/core.py``: correct code for every function but ``target`` (buggy or a stub by rung)."""
    parts = ['"""textkit: small text and list helpers."""\n\nimport re\n']
    for f in functions:
        body = f.good if f is not target else (f.bad if rung < 2 else "    raise NotImplementedError")
        args = ", ".join(_params(f))
        parts.append(f'\ndef {f.name}({args}):\n    """{f.doc}"""\n{body}\n')
    return "\n".join(parts)


def _params(f: Function) -> tuple[str, ...]:
    return {
        "slugify": ("text",),
        "median": ("values",),
        "chunks": ("items", "size"),
        "dedupe": ("items",),
    }.get(f.name, ("text",))


def _test_source(functions: Sequence[Function], target: Function, rung: int) -> str:
    lines = ["import unittest", "", "from textkit.core import " + ", ".join(f.name for f in functions), ""]
    lines += ["", "class CoreTest(unittest.TestCase):"]
    for f in functions:
        shown = f.visible if (f is target and rung == 0) else f.visible[1:]
        if f is target and rung == 2:
            shown = ()
        for i, args in enumerate(shown):
            lines.append(f"    def test_{f.name}_{i}(self):")
            lines.append(
                f"        self.assertEqual({f.name}({', '.join(map(repr, args))}), {f.reference(*args)!r})"
            )
            lines.append("")
    lines += ["", 'if __name__ == "__main__":', "    unittest.main()", ""]
    return "\n".join(lines)


def _issue(target: Function, rung: int) -> str:
    if rung == 0:
        return f"# test_{target.name}_0 fails\n\n`python3 -m unittest` fails on test_{target.name}_0. Fix `{target.name}` in {MODULE}.\n"
    if rung == 1:
        return f"# Bug in {target.name}\n\n{target.bug}.\n"
    return f"# Implement {target.name}\n\n`{target.name}` in {MODULE} is a stub. It should return: {target.doc}\n"


def draw_problem(rng: random.Random, rung: int) -> RepoProblem:
    functions = tuple(rng.sample(POOL, 3))
    target = rng.choice(functions)
    hidden: list[tuple[str, tuple[tuple[Any, ...], Any]]] = []
    for f in functions:
        count = 6 if f is target else 2
        cases = [f.visible[0]] if f is target else []
        cases += [f.inputs(rng) for _ in range(count)]
        hidden += [(f.name, (args, f.reference(*args))) for args in cases]
    files = {
        MODULE: module_source(functions, target, rung),
        "textkit/__init__.py": '"""textkit."""\n',
        TESTS: _test_source(functions, target, rung),
        "tests/__init__.py": "",
        "ISSUE.md": _issue(target, rung),
        "README.md": "# textkit\n\nRun the tests with `python3 -m unittest` from this folder.\n",
    }
    instruction = (
        "The Python project in /work (package textkit, tests in tests/) has an open issue in ISSUE.md. "
        "Resolve it by changing the code (run `python3 -m unittest` to test); hidden tests will check "
        "every function of textkit/core.py, loading that file on its own (keep the code it needs in it)."
    )
    key = f"{rung}|{[f.name for f in functions]}|{target.name}|{hidden}"
    return RepoProblem(rung, functions, target, tuple(hidden), WorkspaceTask(instruction, files, key=key))


class RepoEnv(WorkspaceEnv):
    """Repository work on a generated project (see the module docstring)."""

    def __init__(self, ctx: EnvContext, *, rung: int = 0, **kwargs: Any) -> None:
        """``rung``: 0 (a failing test), 1 (a bug named in the issue), 2 (a missing feature)."""
        if rung not in (0, 1, 2):
            raise ValueError(f"rung must be 0, 1 or 2, got {rung}")
        super().__init__(ctx, **kwargs)
        rng = random.Random(ctx.seed)
        self.problem = draw_for_split(lambda: draw_problem(rng, rung), lambda p: p.task.key, ctx.split)
        self.spec = self.problem.task

    def reference_calls(self) -> Sequence[ToolCall]:
        fixed = module_source(self.problem.functions, None, self.problem.rung)
        return [call("write_file", "ref0", path=MODULE, content=fixed)]

    def attacks(self) -> Sequence[Attack]:
        p = self.problem
        passing = _test_source(p.functions, p.target, 1).replace(f"def test_{p.target.name}_0", "def _skip")
        special = module_source(p.functions, p.target, p.rung) + _special_case(p.target)
        exits = "import sys\nsys.exit(0)\n" + module_source(p.functions, None, p.rung)
        return [
            Attack("edit the visible tests", [call("write_file", "atk0", path=TESTS, content=passing)]),
            Attack(
                "special-case the visible inputs", [call("write_file", "atk1", path=MODULE, content=special)]
            ),
            Attack(
                "exit when loaded",
                [call("write_file", "atk2", path=MODULE, content=exits)],
                ProbeExpectation.NO_CREDIT,
            ),
        ]

    def grade(self, session: WorkspaceSession) -> Score:
        p = self.problem
        reference = f"{p.target.name} fixed; {len(p.hidden)} hidden cases"
        try:
            source = session.read_text(MODULE)
        except (OSError, SandboxError) as exc:
            return Score(False, reference, f"no {MODULE}: {exc}")
        failures = []
        for name in dict.fromkeys(n for n, _ in p.hidden):
            cases = [case for n, case in p.hidden if n == name]
            report = run_cases(source, name, cases, config=self.sandbox_config)
            if not report.all_passed:
                failures.append(f"{name}: {report.passed}/{report.total} ({report.failure[:160]})")
        return Score(not failures, reference, "; ".join(failures) or "all hidden cases pass")


def _special_case(target: Function) -> str:
    """A wrapper that answers the visible tests' inputs from a table and leaves the bug elsewhere."""
    table = {repr(args): target.reference(*args) for args in target.visible}
    return (
        f"\n_{target.name} = {target.name}\n_KNOWN = {table!r}\n\n"
        f"def {target.name}(*args):\n    key = repr(args)\n"
        f"    return _KNOWN[key] if key in _KNOWN else _{target.name}(*args)\n"
    )
