"""Code envs: HumanEval, procedural programming tasks, and multi-turn code with test feedback.

Every candidate runs in :mod:`envsuite.sandbox` (bubblewrap, no network, kernel limits); docs/code.md
describes the envs, their rewards and splits. Catalog ids: ``humaneval``, ``code_easy`` / ``code`` /
``code_hard`` (rungs 0-2 of the procedural tasks) and ``code_feedback``.
"""

from __future__ import annotations

from envsuite.envs.code._feedback import DEFAULT_MAX_TURNS, CodeFeedbackEnv
from envsuite.envs.code._grading import (
    DEFAULT_LIMITS,
    CheckSuite,
    ExtractedCode,
    TestReport,
    canonical,
    extract_code,
    run_cases,
    run_check,
)
from envsuite.envs.code._humaneval import (
    N_PROBLEMS,
    HumanEvalDataError,
    HumanEvalProblem,
    humaneval_candidate,
    humaneval_suite,
    load_humaneval,
)
from envsuite.envs.code._single import CODE_INSTRUCTION, CodeTaskEnv, HumanEvalEnv
from envsuite.envs.code._tasks import FAMILIES, RUNGS, CodeTask, draw_task, families

__all__ = [
    # envs
    "CodeFeedbackEnv",
    "CodeTaskEnv",
    "HumanEvalEnv",
    "CODE_INSTRUCTION",
    "DEFAULT_MAX_TURNS",
    # grading in the sandbox
    "DEFAULT_LIMITS",
    "CheckSuite",
    "ExtractedCode",
    "TestReport",
    "canonical",
    "extract_code",
    "run_cases",
    "run_check",
    # HumanEval
    "N_PROBLEMS",
    "HumanEvalDataError",
    "HumanEvalProblem",
    "humaneval_candidate",
    "humaneval_suite",
    "load_humaneval",
    # procedural tasks
    "FAMILIES",
    "RUNGS",
    "CodeTask",
    "draw_task",
    "families",
]
