"""The shared single-turn problem env: one question, one reply, one graded reward.

Reward (every env built on :class:`ProblemEnv`)::

    reward = correct + format_coef * (format_ok - 1)

``correct`` and ``format_ok`` are 0 or 1, so with the default ``format_coef = 0.1`` a correct, well
formatted reply earns 1.0, a correct reply in the wrong format 0.9, a wrong but well formatted reply
0.0, and a wrong, unformatted, truncated or unreadable reply -0.1. Truncated replies (no stop
sequence) are not graded.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Logs,
    Message,
    Observation,
    ProbeExpectation,
    RewardProbe,
    Split,
    StepResult,
    StopCondition,
    StopReason,
    tokens_outside_vocabulary,
)
from envsuite.grading import GradeOutcome, GradeResult, GraderUnavailableError, parse_number

if TYPE_CHECKING:
    from envsuite.renderers.base import ParsedResponse

DEFAULT_FORMAT_COEF = 0.1
TEST_FRACTION = 0.1
"""Share of a problem space that belongs to the test split (decided by a hash of the question)."""

JUNK_ANSWER = "zzz"
"""The junk answer of a problem whose reference is not a number (no answer of the catalog is this)."""

_MAX_LOG_CHARS = 2000
_MAX_SPLIT_DRAWS = 2000

P = TypeVar("P")


@dataclass(frozen=True)
class Problem:
    """A question and its reference answer."""

    question: str
    answer: str


@dataclass(frozen=True)
class Verdict:
    """How one reply fared: the grade, whether it followed the format, and the answer read from it."""

    grade: GradeResult
    format_ok: bool
    answer: str | None
    """The extracted final answer; None when the reply holds none (a parse error)."""


def split_of(key: str) -> Split:
    """The split a problem belongs to, from a stable hash of its text (train and test never overlap)."""
    bucket = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")
    return "test" if bucket % 1000 < TEST_FRACTION * 1000 else "train"


def draw_for_split(draw: Callable[[], P], key: Callable[[P], str], split: Split) -> P:
    """Draw problems until one falls in ``split``; fails clearly if the problem space is too small."""
    for _ in range(_MAX_SPLIT_DRAWS):
        problem = draw()
        if split_of(key(problem)) == split:
            return problem
    raise ValueError(
        f"drew {_MAX_SPLIT_DRAWS} problems without finding one in the {split!r} split; "
        "the problem space is too small for a train/test split (make it harder or larger)"
    )


def clip(text: str, limit: int = _MAX_LOG_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and end."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} …[{len(text) - 2 * half} chars cut]… {text[-half:]}"


class ProblemEnv(Env):
    """Base of single-turn envs: render the question, parse and check the reply, reward it.

    Subclasses set :attr:`problem` and :attr:`prompt` (the user message) in ``__init__`` and implement
    :meth:`check`. Metrics: ``correct``, ``format``, ``grade_timeout``, ``grade_unavailable`` and
    ``stop/<reason>``; logs: question, reference, reply, extracted answer and the grader's verdict.

    ``step`` never raises: when the grader cannot run at all (its worker failed every start), the reply
    is not graded and the episode ends with ``StopReason.ENV_ERROR``, reward 0, ``grade_unavailable``
    = 1 and the reason in ``logs["error"]`` (trainers drop such groups; benches score them as env errors).
    """

    problem: Problem
    prompt: str

    def __init__(
        self, ctx: EnvContext, *, system_prompt: str | None = None, format_coef: float = DEFAULT_FORMAT_COEF
    ) -> None:
        if format_coef < 0:
            raise ValueError(f"format_coef must be >= 0, got {format_coef}")
        self.ctx = ctx
        self.renderer = ctx.renderer
        self.system_prompt = system_prompt
        self.format_coef = format_coef
        self._prompt_tokens: list[int] = []
        self._reply: str | None = None

    @abstractmethod
    async def check(self, reply: str) -> Verdict:
        """Grade a cleanly stopped reply's text. Must not raise on any text."""

    def answer_reply(self, answer: str) -> str | None:
        """The reply that gives ``answer`` in the format the prompt asks for; None (the default) when
        the env has no such format, and so no reward probes of its own (see :meth:`reward_probes`)."""
        return None

    def junk_answer(self) -> str:
        """A wrong answer to the problem: the reference plus one for a number, else :data:`JUNK_ANSWER`."""
        value = parse_number(self.problem.answer)
        if value is None:
            return JUNK_ANSWER
        wrong = value + 1
        return str(wrong.numerator) if wrong.denominator == 1 else f"{wrong.numerator}/{wrong.denominator}"

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The reference answer in format (full marks), a wrong answer in format and the format with no
        answer in it (both less), from :meth:`answer_reply`; none when the env has no answer format."""
        reference = self.answer_reply(self.problem.answer)
        junk = self.answer_reply(self.junk_answer())
        shell = self.answer_reply("")
        if reference is None or junk is None or shell is None:
            return ()
        return (
            RewardProbe("reference", reference, ProbeExpectation.FULL_MARKS),
            RewardProbe("wrong answer in format", junk, ProbeExpectation.BELOW_REFERENCE),
            RewardProbe("format without an answer", shell, ProbeExpectation.BELOW_REFERENCE),
        )

    def messages(self) -> list[Message]:
        system: list[Message] = (
            [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        )
        return [*system, {"role": "user", "content": self.prompt}]

    def conversation(self) -> list[Message]:
        replied: list[Message] = (
            [] if self._reply is None else [{"role": "assistant", "content": self._reply}]
        )
        return [*self.messages(), *replied]

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        model_input = self.renderer.build_generation_prompt(self.messages())
        if model_input.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(model_input.length, self.ctx.max_context_tokens)
        self._prompt_tokens = model_input.to_ints()
        return model_input, self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        outside = tokens_outside_vocabulary(action, self.renderer.vocab_size)
        if outside is not None:
            result = self._final([], "", StopReason.PARSE_ERROR, None, "unreadable reply")
            result.logs["error"] = outside
            return result
        parsed = self._parse(action)
        reply = parsed.message["content"] if parsed is not None else ""
        self._reply = reply
        if parsed is None or not parsed.valid_utf8 or not reply.strip():
            why = "unreadable reply" if parsed is None or not parsed.valid_utf8 else "empty reply"
            return self._final(action, reply, StopReason.PARSE_ERROR, None, why)
        if not parsed.clean_stop:
            return self._final(action, reply, StopReason.MAX_TOKENS, None, "truncated reply (not graded)")
        try:
            verdict = await self.check(reply)
        except GraderUnavailableError as exc:
            return self._ungraded(action, reply, str(exc))
        unreadable = verdict.answer is None or verdict.grade.outcome is GradeOutcome.UNPARSEABLE
        stop = StopReason.PARSE_ERROR if unreadable else StopReason.COMPLETED
        return self._final(action, reply, stop, verdict, verdict.grade.detail)

    def _parse(self, action: Action) -> ParsedResponse | None:
        try:
            return self.renderer.parse_response(list(action))
        except Exception:
            # The renderer contract says parse_response never raises; a broken one must not crash a run.
            return None

    def _ungraded(self, action: Action, reply: str, why: str) -> StepResult:
        """The grader could not run: no verdict on the model, so reward 0 and an env error."""
        result = self._final(action, reply, StopReason.ENV_ERROR, None, why)
        result.reward = 0.0
        result.metrics["grade_unavailable"] = 1.0
        result.logs["grade"] = f"unavailable: {why}"
        result.logs["error"] = f"grader unavailable: {why}"[:500]
        return result

    def _final(
        self, action: Action, reply: str, stop: StopReason, verdict: Verdict | None, detail: str
    ) -> StepResult:
        import tinker

        correct = verdict is not None and verdict.grade.correct
        format_ok = verdict is not None and verdict.format_ok
        outcome = verdict.grade.outcome.value if verdict is not None else "not graded"
        logs: Logs = {
            "question": clip(self.problem.question),
            "reference": self.problem.answer,
            "reply": clip(reply),
            "answer": clip(verdict.answer or "", 200) if verdict is not None else "",
            "grade": f"{outcome}: {detail}" if detail else outcome,
        }
        timed_out = verdict is not None and verdict.grade.outcome is GradeOutcome.TIMEOUT
        return StepResult.final(
            reward=float(correct) + self.format_coef * (float(format_ok) - 1.0),
            stop_reason=stop,
            next_observation=tinker.ModelInput.from_ints(self._prompt_tokens + [int(t) for t in action]),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={
                "correct": float(correct),
                "format": float(format_ok),
                "grade_timeout": float(timed_out),
                "grade_unavailable": 0.0,
            },
            logs=logs,
        )
