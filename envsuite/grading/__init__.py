"""Answer grading for math envs: extraction, exact numbers, and time-bounded math-verify.

``grade_answer(prediction, reference)`` returns a :class:`GradeResult`. Plain numbers compare exactly;
everything else is checked by math-verify in a persistent worker process with a hard wall-clock bound,
so grading is safe from any thread and on any model output (which is never executed).
"""

from __future__ import annotations

from envsuite.grading._client import DEFAULT_TIMEOUT_S, Grader, GraderUnavailableError
from envsuite.grading._extract import (
    AnswerSource,
    ExtractedAnswer,
    extract_boxed,
    extract_final_answer,
    parse_number,
)
from envsuite.grading._grade import default_grader, grade_answer, grade_answer_async
from envsuite.grading._guard import MAX_ANSWER_CHARS, screen_answer
from envsuite.grading._result import GradeOutcome, GradeResult

__all__ = [
    # grading
    "DEFAULT_TIMEOUT_S",
    "GradeOutcome",
    "GradeResult",
    "Grader",
    "GraderUnavailableError",
    "default_grader",
    "grade_answer",
    "grade_answer_async",
    # extraction and screening
    "MAX_ANSWER_CHARS",
    "AnswerSource",
    "ExtractedAnswer",
    "extract_boxed",
    "extract_final_answer",
    "parse_number",
    "screen_answer",
]
