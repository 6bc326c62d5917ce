"""What grading returns: an outcome enum and a small result record."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GradeOutcome(enum.StrEnum):
    """How a prediction compared with its reference. Only ``CORRECT`` counts as correct."""

    CORRECT = "correct"
    """The prediction equals the reference (exactly for plain numbers, by math-verify otherwise)."""
    WRONG = "wrong"
    """Both sides were understood and they differ."""
    UNPARSEABLE = "unparseable"
    """No answer could be read from the prediction (or, rarely, from the reference)."""
    TIMEOUT = "timeout"
    """math-verify ran past its time bound; the worker was stopped (and restarted if needed)."""
    REJECTED = "rejected"
    """Refused before parsing: too long, or a power/factorial too large to evaluate safely."""
    ERROR = "error"
    """The grading worker failed unexpectedly (it is restarted on the next call)."""


@dataclass(frozen=True)
class GradeResult:
    """The verdict on one prediction."""

    outcome: GradeOutcome
    detail: str = ""
    """Why, for humans: which path decided (``exact`` or ``math-verify``) or what went wrong."""

    @property
    def correct(self) -> bool:
        return self.outcome is GradeOutcome.CORRECT
