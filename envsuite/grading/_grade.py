"""``grade_answer``: screen, try the exact path for plain numbers, else ask the math-verify worker."""

from __future__ import annotations

import asyncio
import atexit
import threading

from envsuite.grading._client import DEFAULT_TIMEOUT_S, Grader
from envsuite.grading._extract import extract_boxed, parse_number
from envsuite.grading._guard import screen_answer
from envsuite.grading._result import GradeOutcome, GradeResult

_default_grader: Grader | None = None
_default_lock = threading.Lock()


def default_grader() -> Grader:
    """The process-wide grader (its worker starts on first use and stops at interpreter exit)."""
    global _default_grader
    with _default_lock:
        if _default_grader is None:
            _default_grader = Grader()
            atexit.register(_default_grader.close)
        return _default_grader


def grade_answer(
    prediction: str,
    reference: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grader: Grader | None = None,
) -> GradeResult:
    """Grade ``prediction`` (a final answer, or a reply containing ``\\boxed{...}``) against ``reference``.

    Plain numbers on both sides are compared exactly as fractions (``1,000`` = ``1000``, ``0.5`` = ``1/2``
    = ``\\frac{1}{2}``), without the worker. Anything else goes to math-verify in the worker process,
    bounded by ``timeout_s`` of wall-clock time. Over-long answers and huge powers or factorials are
    rejected before any parsing. Never raises on any prediction (only
    :class:`~envsuite.grading.GraderUnavailableError` when no worker can start at all); callable from any
    thread. Blocks for at most about ``timeout_s`` (plus the worker's start-up on first use).
    """
    answer = _answer_text(prediction)
    ref = _answer_text(reference)
    if not answer:
        return GradeResult(GradeOutcome.UNPARSEABLE, "empty answer")
    reason = screen_answer(answer)
    if reason is not None:
        return GradeResult(GradeOutcome.REJECTED, reason)
    reason = screen_answer(ref)
    if reason is not None:
        return GradeResult(GradeOutcome.REJECTED, f"reference: {reason}")
    exact_answer, exact_ref = parse_number(answer), parse_number(ref)
    if exact_answer is not None and exact_ref is not None:
        outcome = GradeOutcome.CORRECT if exact_answer == exact_ref else GradeOutcome.WRONG
        return GradeResult(outcome, "exact")
    return (grader or default_grader()).verify(ref, answer, timeout_s=timeout_s)


async def grade_answer_async(
    prediction: str,
    reference: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    grader: Grader | None = None,
) -> GradeResult:
    """:func:`grade_answer` without blocking the event loop (it runs in a worker thread)."""
    return await asyncio.to_thread(grade_answer, prediction, reference, timeout_s=timeout_s, grader=grader)


def _answer_text(text: str) -> str:
    boxed = extract_boxed(text)
    return (boxed if boxed else text).strip()
