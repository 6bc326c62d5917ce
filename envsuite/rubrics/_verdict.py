"""Reading a judge's reply: every reply maps to a :class:`VerdictOutcome`, none raises.

Small judges ramble, echo the question or answer both ways; a verdict that cannot be read is
``MALFORMED`` and scores 0.0 (the reply earns nothing from a judge that did not decide), so a malformed
verdict is a counted outcome (``judge-check`` reports its rate), never a crash.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from envsuite.rubrics._contract import VerdictFormat


class VerdictOutcome(enum.Enum):
    YES = "yes"
    NO = "no"
    SCORE = "score"
    MALFORMED = "malformed"


class PairOutcome(enum.Enum):
    FIRST = "first"
    SECOND = "second"
    TIE = "tie"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class Verdict:
    """A pointwise verdict: its outcome and the score in [0, 1] it gives."""

    outcome: VerdictOutcome
    score: float
    raw: str


_YES_NO = re.compile(r"VERDICT\s*[:=]?\s*\**\s*(YES|NO)\b", re.IGNORECASE)
_SCORE = re.compile(r"SCORE\s*[:=]?\s*\**\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_WORD = re.compile(r"\b(YES|NO)\b", re.IGNORECASE)
_PAIR = re.compile(r"(?:WINNER|BETTER)\s*[:=]?\s*\**\s*(A|B|TIE)\b", re.IGNORECASE)


def parse_verdict(text: str, verdict: VerdictFormat) -> Verdict:
    """The verdict in ``text``; the last tagged one wins, since judges often restate the format first."""
    if verdict is VerdictFormat.SCORE_0_10:
        scores = _SCORE.findall(text)
        if scores and 0.0 <= float(scores[-1]) <= 10.0:
            return Verdict(VerdictOutcome.SCORE, float(scores[-1]) / 10.0, text)
        return Verdict(VerdictOutcome.MALFORMED, 0.0, text)
    tagged = [m.upper() for m in _YES_NO.findall(text)]
    if not tagged:
        # Untagged: small judges answer 'The answer ... is "No."'; one of the two words alone decides.
        tagged = [m.upper() for m in _WORD.findall(text)]
    if not tagged or len(set(tagged)) > 1:
        # Both answers tagged is not a decision: reading either would reward hedging.
        return Verdict(VerdictOutcome.MALFORMED, 0.0, text)
    yes = tagged[0] == "YES"
    return Verdict(VerdictOutcome.YES if yes else VerdictOutcome.NO, 1.0 if yes else 0.0, text)


def parse_pair(text: str) -> PairOutcome:
    """``WINNER: A`` / ``B`` / ``TIE``; anything else, or two different winners, is ``MALFORMED``."""
    found = {m.upper() for m in _PAIR.findall(text)}
    if len(found) != 1:
        return PairOutcome.MALFORMED
    return {"A": PairOutcome.FIRST, "B": PairOutcome.SECOND, "TIE": PairOutcome.TIE}[found.pop()]
