"""The built-in single-turn math envs (``arithmetic``, ``math``) and their shared problem-env base.

Envs are normally made from the catalog (``envsuite.make_env("math")``); the classes are exported for
subclassing and inspection. Reward: ``correct + format_coef * (format_ok - 1)`` (see docs/math.md).
"""

from __future__ import annotations

from envsuite.envs._datasets import MathDatasetError
from envsuite.envs._problem import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict, split_of
from envsuite.envs._word_problems import TEMPLATES as WORD_PROBLEM_TEMPLATES
from envsuite.envs._word_problems import draw_word_problem
from envsuite.envs.arithmetic import OPERATIONS, ArithmeticEnv
from envsuite.envs.math_word import INSTRUCTION as MATH_INSTRUCTION
from envsuite.envs.math_word import MathWordEnv

__all__ = [
    # envs
    "ArithmeticEnv",
    "MathWordEnv",
    # building blocks for single-turn problem envs
    "DEFAULT_FORMAT_COEF",
    "Problem",
    "ProblemEnv",
    "Verdict",
    "split_of",
    # problem sources and knobs
    "MATH_INSTRUCTION",
    "OPERATIONS",
    "WORD_PROBLEM_TEMPLATES",
    "MathDatasetError",
    "draw_word_problem",
]
