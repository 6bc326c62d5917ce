"""What a capture holds: every call of an outside agent to ``envsuite serve``'s OpenAI routes, with the
exact prompt and sampled token ids, grouped into episodes, and an episode's score.

Invariants (what training relies on):

* ``CapturedCall.prompt_tokens`` are the tokens the model was given and ``CapturedChoice.tokens`` /
  ``logprobs`` the tokens it sampled and their logprobs, stop token included: never a re-tokenization
  of any text.
* ``continues`` names the earlier call and choice of the same episode whose reply this call's request
  carried on (its conversation repeats that reply verbatim, or its prompt starts with that call's prompt
  plus the reply's tokens). When the chat format allows it, the server renders such a prompt as exactly
  that earlier prompt + reply tokens + the new turns, so the episode trains as one sequence.
* An episode's score has one reward per choice of its last call, or one for all of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

EPISODE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
"""Client-chosen episode and group ids: they name files, so no separators and no leading dot."""
CAPTURE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""Capture set names (a directory each)."""


@dataclass(frozen=True)
class CapturedChoice:
    """One sampled reply of a call."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str
    """``stop``, ``length`` or ``tool_calls``, as the client was told."""
    text: str
    """The reply's content (chat) or text (completions), as the client received it."""
    tool_calls: list[dict[str, object]] = field(default_factory=list)

    def reply_message(self) -> dict[str, object]:
        """The assistant message a client sends back to continue after this reply."""
        message: dict[str, object] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


@dataclass(frozen=True)
class CapturedCall:
    """One request and its reply."""

    episode_id: str
    seq: int
    """The call's position in its episode (0, 1, ...)."""
    created: float
    endpoint: str
    """``chat.completions`` or ``completions``."""
    model: str
    """As the client named it (a ``tinker://`` path, a directory, a base model name)."""
    base_model: str
    chat_format: str | None
    """``chat_template`` or an envsuite renderer name (chat); None for completions."""
    params: dict[str, object]
    """The sampling parameters the request gave (max_tokens, temperature, seed, ...)."""
    prompt_tokens: list[int]
    choices: list[CapturedChoice]
    conversation: list[dict[str, object]] | None = None
    """The chat request's messages, normalized (chat only)."""
    continues: list[int] | None = None
    """``[seq, choice]`` of the call whose reply this one carries on, in the same episode."""
    group: str | None = None
    """The client's group id (``X-Envsuite-Group``), if it gave one."""

    def to_json(self) -> str:
        return json.dumps({"kind": "call", **asdict(self)}, separators=(",", ":"))

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> CapturedCall:
        values = {k: v for k, v in data.items() if k != "kind"}
        values["choices"] = [CapturedChoice(**c) for c in values["choices"]]
        return CapturedCall(**values)

    def extends(self, choice: int) -> list[int]:
        """This call's prompt followed by choice ``choice``'s sampled tokens."""
        return self.prompt_tokens + self.choices[choice].tokens


@dataclass(frozen=True)
class EpisodeScore:
    """An episode's reward(s), posted by the client or computed by a catalog env's grader."""

    rewards: list[float]
    """One per choice of the episode's last call, or a single one for all of them."""
    source: str
    """``posted``, or ``grader:<env id>@<seed>``."""
    created: float

    def to_json(self) -> str:
        return json.dumps({"kind": "score", **asdict(self)}, separators=(",", ":"))


@dataclass(frozen=True)
class CapturedEpisode:
    """An episode's calls in order, and its latest score."""

    episode_id: str
    calls: list[CapturedCall]
    score: EpisodeScore | None = None

    @property
    def group(self) -> str:
        """The client's group id, else one shared by every episode that opened with the same prompt
        (the same problem, asked again: GRPO compares such episodes with each other)."""
        first = self.calls[0]
        if first.group:
            return first.group
        digest = hashlib.sha256(json.dumps(first.prompt_tokens).encode()).hexdigest()[:16]
        return f"prompt-{first.model}-{digest}"

    def rewards(self) -> list[float]:
        """One reward per choice of the last call (raises ValueError when unscored or mismatched)."""
        if self.score is None:
            raise ValueError(f"episode {self.episode_id!r} has no score")
        width = len(self.calls[-1].choices)
        rewards = self.score.rewards
        if len(rewards) == 1:
            return rewards * width
        if len(rewards) != width:
            raise ValueError(
                f"episode {self.episode_id!r} ends in a call with {width} choices but has {len(rewards)} rewards"
            )
        return list(rewards)

    def chains(self) -> list[list[tuple[CapturedCall, int]]]:
        """Each final choice's path through the episode: ``(call, choice)`` per call, in order. Of an
        earlier call, the choice the next call carried on (else its first)."""
        path: list[tuple[CapturedCall, int]] = []
        for call, after in zip(self.calls, self.calls[1:], strict=False):
            carried = after.continues if after.continues and after.continues[0] == call.seq else None
            path.append((call, carried[1] if carried else 0))
        last = self.calls[-1]
        return [[*path, (last, c)] for c in range(len(last.choices))]


def conversation_key(messages: Sequence[Mapping[str, object]]) -> str:
    """A digest naming a conversation (the key that threads a request to the call it continues)."""
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
