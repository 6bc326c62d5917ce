"""Capture on the server: which requests are captured, which episode each call belongs to, and its record.

A request is captured when it carries ``X-Envsuite-Capture: NAME`` or one of the server's capture keys
(``--capture-keys``; the key check notes which set in the request's scope). Its episode is the client's
``X-Envsuite-Episode`` id, else the episode of the call whose reply its conversation repeats (threading,
so agents that cannot set headers still get whole episodes), else a new one; the reply's
``X-Envsuite-Episode`` header names it. A chat request that continues an earlier call of its episode
on the same model and chat format is rendered as that call's prompt + its sampled tokens + the new
turns when the format allows (``ChatFormat.extend``): the model then sees its own tokens, not a
re-tokenization of their text, and the episode trains as one sequence.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from envsuite.capture import CapturedCall, CapturedChoice, CaptureStore, ThreadLink, check_id
from envsuite.chat import Message
from envsuite.serve._state import ServerState
from envsuite.serve.openai_api._chat import ChatFormat
from envsuite.serve.openai_api._models import ServedModel
from envsuite.serve.openai_api._wire import OpenAIError

CAPTURE_HEADER = "x-envsuite-capture"
EPISODE_HEADER = "x-envsuite-episode"
GROUP_HEADER = "x-envsuite-group"
SCOPE_KEY = "envsuite.capture"
"""Where the key check puts the capture set of a request that carried a capture key."""


@dataclass(frozen=True)
class Turn:
    """Where a call sits in its episode."""

    episode_id: str
    continues: ThreadLink | None
    """The earlier call and choice this one carries on (same episode), if any."""
    previous: CapturedCall | None
    """That call."""


def capture_set(request: Request) -> str | None:
    """The capture set a request names (its capture key's, else its header's); None: not captured."""
    name = request.scope.get(SCOPE_KEY) or request.headers.get(CAPTURE_HEADER)
    return str(name) if name else None


@dataclass(frozen=True)
class CaptureRequest:
    """A captured request's store and the ids its client gave."""

    store: CaptureStore
    episode_id: str | None
    group: str | None

    @classmethod
    def of(cls, request: Request, state: ServerState) -> CaptureRequest | None:
        name = capture_set(request)
        episode = request.headers.get(EPISODE_HEADER)
        group = request.headers.get(GROUP_HEADER)
        if name is None:
            if episode or group:
                raise OpenAIError(
                    400,
                    "X-Envsuite-Episode and X-Envsuite-Group need capture: add X-Envsuite-Capture: NAME "
                    "or use a capture key",
                    param=EPISODE_HEADER if episode else GROUP_HEADER,
                )
            return None
        try:
            store = state.captures.get(name)
            episode = check_id(episode, "X-Envsuite-Episode") if episode else None
            group = check_id(group, "X-Envsuite-Group") if group else None
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="headers") from exc
        return cls(store, episode, group)

    def place_chat(self, messages: list[Message]) -> Turn:
        """The episode of a chat call, and the earlier reply its conversation repeats (if any)."""
        link = self.store.thread([dict(m) for m in messages])
        if self.episode_id is not None and link is not None and link.episode_id != self.episode_id:
            link = None
        episode = self.episode_id or (link.episode_id if link else self.store.new_episode_id())
        previous = self.store.call(episode, link.seq) if link else None
        return Turn(episode, link if previous else None, previous)

    def place_tokens(self, turn: Turn | None, prompt: list[int]) -> Turn:
        """``turn`` (or a fresh one) with ``continues`` found by tokens when it has none: the prompt
        starts with the episode's last call's prompt plus one of its choices' sampled tokens."""
        episode = turn.episode_id if turn else self.episode_id or self.store.new_episode_id()
        if turn is not None and turn.continues is not None:
            return turn
        last = self.store.last_call(episode)
        for index in range(len(last.choices) if last else 0):
            assert last is not None
            extended = last.extends(index)
            if prompt[: len(extended)] == extended:
                return Turn(episode, ThreadLink(episode, last.seq, index), last)
        return turn or Turn(episode, None, None)

    def spliced_prompt(
        self, turn: Turn, fmt: ChatFormat, served: ServedModel, messages: list[Message]
    ) -> list[int] | None:
        """The prompt as the continued call's prompt + its sampled reply + the new turns, where possible."""
        previous, link = turn.previous, turn.continues
        if (
            previous is None
            or link is None
            or previous.model != served.name
            or previous.chat_format != fmt.name
        ):
            return None
        return fmt.extend(previous.prompt_tokens, previous.choices[link.choice].tokens, messages)

    async def record(
        self,
        turn: Turn,
        *,
        endpoint: str,
        served: ServedModel,
        chat_format: str | None,
        params: dict[str, Any],
        prompt: list[int],
        choices: list[CapturedChoice],
        conversation: list[Message] | None = None,
    ) -> CapturedCall:
        call = CapturedCall(
            episode_id=turn.episode_id,
            seq=0,  # the store numbers the episode's calls
            created=time.time(),
            endpoint=endpoint,
            model=served.name,
            base_model=served.base_model,
            chat_format=chat_format,
            params={k: v for k, v in params.items() if v is not None},
            prompt_tokens=list(prompt),
            choices=choices,
            conversation=None if conversation is None else [dict(m) for m in conversation],
            continues=None if turn.continues is None else [turn.continues.seq, turn.continues.choice],
            group=self.group,
        )
        return await asyncio.to_thread(self.store.append, call)


def episode_summary(store: CaptureStore, episode_id: str, *, calls: bool) -> dict[str, Any]:
    """An episode as JSON: its group, its score and (``calls``) every call with its tokens."""
    episode = store.episode(episode_id)
    summary: dict[str, Any] = {
        "id": episode.episode_id,
        "group": episode.group if episode.calls else None,
        "n_calls": len(episode.calls),
        "score": None if episode.score is None else dataclasses.asdict(episode.score),
    }
    if calls:
        summary["calls"] = [dataclasses.asdict(c) for c in episode.calls]
    return summary
