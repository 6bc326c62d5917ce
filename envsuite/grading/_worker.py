"""The grading worker: a separate Python process that runs math-verify on its main thread.

Started by :class:`envsuite.grading.Grader` as ``python -m envsuite.grading._worker``. Running it as a
module (rather than through ``multiprocessing``'s spawn or forkserver) means the parent's ``__main__``
is never re-imported, so user scripts without an ``if __name__ == "__main__"`` guard work.

Protocol: one JSON object per line. The worker first writes ``{"ready": true}``; then for every request
``{"id", "reference", "prediction", "timeout"}`` on stdin it writes ``{"id", "outcome", "detail"}``.
Only the protocol goes to the real stdout; anything a library prints is moved to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import IO, Protocol, TypedDict

_UNIT_SUFFIX_RE = re.compile(r"^(?P<value>.*?[\d}])\s*(?:[A-Za-z]{2,}\.?\s*)+$")
"""A value followed by plain words ("12 dollars", "5 cm"): the words are units, not factors."""

_PROSE_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}")
"""Two plain words in a row: the prediction is prose around a value, not a formula."""

_MEMORY_LIMIT_BYTES = 4 * 1024**3


class GradeRequest(TypedDict):
    """One request line."""

    id: int
    reference: str
    prediction: str
    timeout: int
    """math-verify's own time limit, in whole seconds."""


class GradeReply(TypedDict):
    """The answer line to one request."""

    id: int | None
    outcome: str
    """A :class:`~envsuite.grading.GradeOutcome` value."""
    detail: str


class Parse(Protocol):
    """``math_verify.parse`` as called here: the parsed forms of an answer (empty when none is found)."""

    def __call__(self, pred: str, *, parsing_timeout: int, raise_on_error: bool) -> list[object]: ...


class Verify(Protocol):
    """``math_verify.verify`` as called here: whether two parsed answers are equal."""

    def __call__(
        self, gold: list[object], target: list[object], *, timeout_seconds: int, raise_on_error: bool
    ) -> bool: ...


def _strip_units(prediction: str) -> str:
    match = _UNIT_SUFFIX_RE.match(prediction)
    return match.group("value") if match else prediction


def grade(reference: str, prediction: str, timeout: int, parse: Parse, verify: Verify) -> tuple[str, str]:
    """Compare with math-verify; returns ``(outcome, detail)`` with outcome a GradeOutcome value."""
    gold = parse(f"\\boxed{{{_strip_units(reference)}}}", parsing_timeout=timeout, raise_on_error=True)
    if not gold:
        gold = parse(reference, parsing_timeout=timeout, raise_on_error=True)
    if not gold:
        return "unparseable", "math-verify: the reference could not be parsed"
    # Boxing makes math-verify read the whole answer as one LaTeX formula; prose around a value is
    # better left to math-verify's own extraction, which finds the value inside the text.
    boxed = f"\\boxed{{{_strip_units(prediction)}}}"
    attempts = (prediction, boxed) if _PROSE_RE.search(prediction) else (boxed, prediction)
    pred: list[object] = []
    for attempt in attempts:
        pred = parse(attempt, parsing_timeout=timeout, raise_on_error=True)
        if pred:
            break
    if not pred:
        return "unparseable", "math-verify: no answer found in the prediction"
    ok = verify(gold, pred, timeout_seconds=timeout, raise_on_error=True)
    return ("correct" if ok else "wrong"), "math-verify"


def _handle(request: GradeRequest, parse: Parse, verify: Verify) -> GradeReply:
    from math_verify.errors import TimeoutException

    try:
        outcome, detail = grade(
            str(request["reference"]), str(request["prediction"]), int(request["timeout"]), parse, verify
        )
    except TimeoutException:
        outcome, detail = "timeout", "math-verify timed out inside the worker"
    except MemoryError:
        outcome, detail = "rejected", "answer needed too much memory"
    except Exception as exc:
        # math-verify raises on answers it cannot parse or compare; that is a verdict, not a failure.
        outcome, detail = "unparseable", f"math-verify error: {type(exc).__name__}"
    return {"id": request.get("id"), "outcome": outcome, "detail": detail}


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT_BYTES, _MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # best effort: the parent's deadline still bounds the worker


def _protocol_stream() -> IO[str]:
    """A private handle on the real stdout; fd 1 is pointed at stderr so stray prints cannot corrupt it."""
    stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return stream


def main() -> None:
    out = _protocol_stream()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)
    from math_verify import parse, verify

    _limit_memory()
    grade("1", "1", 1, parse, verify)  # warm up: the first call pays for lazy imports and regex builds
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except json.JSONDecodeError:
            continue
        out.write(json.dumps(_handle(request, parse, verify)) + "\n")


if __name__ == "__main__":
    main()
