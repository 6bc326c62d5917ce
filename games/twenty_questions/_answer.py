"""The answerer contract, its three answers, and the adapter that turns any MessageCompleter into one."""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod

from envsuite.core import Message, MessageCompleter


class Answer(enum.StrEnum):
    """Everything the answerer may say (the value is the exact text the player sees)."""

    YES = "Yes."
    NO = "No."
    UNKNOWN = "I can't answer that."
    """The question is not a yes/no question the answerer understands."""


class Answerer(ABC):
    """Answers yes/no questions about a secret word. Part of the env's identity in results."""

    @abstractmethod
    async def answer(self, secret: str, question: str) -> Answer:
        """Answer ``question`` (any text, possibly garbage) about ``secret``; never raises on bad text."""

    def identity(self) -> str:
        """Stable description for result keys and logs."""
        return type(self).__name__

    def knows(self, secret: str) -> bool:
        """Whether this answerer can play ``secret`` (the rule answerer needs it in its knowledge base)."""
        return bool(secret.strip())


_ANSWERER_PROMPT = (
    "You are the answerer in a game of twenty questions. The secret word is {secret!r}. "
    "The player asks one question about it. Reply with exactly one of: 'Yes.', 'No.', or "
    '"I can\'t answer that." (use the last when the question is not a yes/no question). '
    "Never reveal the secret word."
)
_UNKNOWN_RE = re.compile(r"\b(can ?not|can't|cannot|unable|unknown|not sure|don't know|unclear|depends)\b")


def normalize_reply(text: str) -> Answer:
    """Map a free-form model reply onto the three answers; anything unclear is UNKNOWN."""
    lowered = text.strip().lower()
    if _UNKNOWN_RE.search(lowered[:40]):
        return Answer.UNKNOWN
    first = re.match(r"[^a-z]*([a-z]+)", lowered)
    word = first.group(1) if first else ""
    if word in ("yes", "yeah", "yep", "correct", "true", "right"):
        return Answer.YES
    if word in ("no", "nope", "false", "incorrect", "wrong"):
        return Answer.NO
    return Answer.UNKNOWN


class CompleterAnswerer(Answerer):
    """Any MessageCompleter (local model, Tinker sampler, Inspect model) as the answerer."""

    def __init__(self, completer: MessageCompleter) -> None:
        self.completer = completer

    def identity(self) -> str:
        return f"completer:{self.completer.identity()}"

    async def answer(self, secret: str, question: str) -> Answer:
        messages: list[Message] = [
            {"role": "system", "content": _ANSWERER_PROMPT.format(secret=secret)},
            {"role": "user", "content": question},
        ]
        reply = await self.completer(messages)
        return normalize_reply(reply.get("content", ""))
