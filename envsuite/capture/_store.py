"""A capture set on disk: ``<dir>/episodes/<episode id>.jsonl``, one JSON line per call and per score.

Lines are appended and never rewritten, so a server killed mid-run loses at most the line being
written (a torn last line is skipped when read). The latest score line wins. The store also keeps the
index that threads a chat request to the call it continues (by the digest of the conversation up to
and including that call's reply); it is rebuilt from the files when the store opens, so threading
survives a restart. Thread-safe: the server's handlers share one store per capture set.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envsuite.capture._records import (
    CAPTURE_NAME_PATTERN,
    EPISODE_ID_PATTERN,
    CapturedCall,
    CapturedEpisode,
    EpisodeScore,
    conversation_key,
)

_MAX_THREADS = 100_000
"""Conversation keys kept for threading (least recently used first out)."""
_MAX_CACHED_EPISODES = 1024


class UnknownEpisodeError(LookupError):
    """An episode id the capture set does not hold."""


@dataclass(frozen=True)
class ThreadLink:
    """Where a conversation's last assistant message came from: an episode's call and choice."""

    episode_id: str
    seq: int
    choice: int


def check_id(value: str, what: str, pattern: str = EPISODE_ID_PATTERN) -> str:
    """``value`` if it is a valid id (letters, digits, ``._:-``; no leading dot), else ValueError."""
    if not re.match(pattern, value):
        raise ValueError(f"{what} {value!r} is not a valid id (letters, digits and ._:- only, at most 128)")
    return value


class CaptureStore:
    """One capture set (a directory)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.episodes_dir = self.root / "episodes"
        self._lock = threading.Lock()
        self._calls: OrderedDict[str, list[CapturedCall]] = OrderedDict()
        self._threads: OrderedDict[str, ThreadLink] | None = None

    @staticmethod
    def new_episode_id() -> str:
        return f"ep-{uuid.uuid4().hex[:16]}"

    # -- writing -------------------------------------------------------------------------------

    def append(self, call: CapturedCall) -> CapturedCall:
        """Record ``call`` as its episode's next call (its ``seq`` is assigned here) and thread its replies."""
        check_id(call.episode_id, "episode id")
        with self._lock:
            calls = self._episode_calls(call.episode_id)
            stored = dataclasses.replace(call, seq=len(calls))
            self._write(call.episode_id, stored.to_json())
            calls.append(stored)
            if stored.conversation is not None:
                threads = self._thread_index()
                for index, choice in enumerate(stored.choices):
                    key = conversation_key([*stored.conversation, choice.reply_message()])
                    threads[key] = ThreadLink(stored.episode_id, stored.seq, index)
                    threads.move_to_end(key)
                while len(threads) > _MAX_THREADS:
                    threads.popitem(last=False)
        return stored

    def score(self, episode_id: str, rewards: Sequence[float], source: str) -> EpisodeScore:
        """Record the episode's reward(s): one per choice of its last call, or one for all."""
        episode = self.episode(episode_id)
        values = [float(r) for r in rewards]
        width = len(episode.calls[-1].choices)
        if len(values) not in (1, width) or any(v != v or v in (float("inf"), float("-inf")) for v in values):
            raise ValueError(
                f"give one finite reward, or {width} (one per choice of the episode's last call)"
            )
        score = EpisodeScore(values, source, time.time())
        with self._lock:
            self._write(episode_id, score.to_json())
        return score

    def _write(self, episode_id: str, line: str) -> None:
        self.episodes_dir.mkdir(parents=True, exist_ok=True)
        with open(self.episodes_dir / f"{episode_id}.jsonl", "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    # -- reading -------------------------------------------------------------------------------

    def episode(self, episode_id: str) -> CapturedEpisode:
        check_id(episode_id, "episode id")
        path = self.episodes_dir / f"{episode_id}.jsonl"
        if not path.is_file():
            raise UnknownEpisodeError(f"no captured episode {episode_id!r}")
        return _read_episode(episode_id, path)

    def episodes(self) -> list[CapturedEpisode]:
        """Every episode with at least one call, oldest first."""
        if not self.episodes_dir.is_dir():
            return []
        found = [_read_episode(p.stem, p) for p in self.episodes_dir.glob("*.jsonl")]
        return sorted((e for e in found if e.calls), key=lambda e: (e.calls[0].created, e.episode_id))

    def call(self, episode_id: str, seq: int) -> CapturedCall | None:
        with self._lock:
            calls = self._episode_calls(episode_id)
            return calls[seq] if 0 <= seq < len(calls) else None

    def last_call(self, episode_id: str) -> CapturedCall | None:
        with self._lock:
            calls = self._episode_calls(episode_id)
            return calls[-1] if calls else None

    def thread(self, conversation: Sequence[Mapping[str, object]]) -> ThreadLink | None:
        """The call whose reply a conversation carries on: the digest of the conversation up to its last
        assistant message, looked up among recorded replies."""
        last = max((i for i, m in enumerate(conversation) if m.get("role") == "assistant"), default=None)
        if last is None:
            return None
        with self._lock:
            return self._thread_index().get(conversation_key(list(conversation[: last + 1])))

    def _episode_calls(self, episode_id: str) -> list[CapturedCall]:
        calls = self._calls.get(episode_id)
        if calls is None:
            path = self.episodes_dir / f"{episode_id}.jsonl"
            calls = _read_episode(episode_id, path).calls if path.is_file() else []
            self._calls[episode_id] = calls
            while len(self._calls) > _MAX_CACHED_EPISODES:
                self._calls.popitem(last=False)
        self._calls.move_to_end(episode_id)
        return calls

    def _thread_index(self) -> OrderedDict[str, ThreadLink]:
        if self._threads is None:
            self._threads = OrderedDict()
            for episode in self.episodes():
                for call in episode.calls:
                    if call.conversation is None:
                        continue
                    for index, choice in enumerate(call.choices):
                        key = conversation_key([*call.conversation, choice.reply_message()])
                        self._threads[key] = ThreadLink(episode.episode_id, call.seq, index)
        return self._threads


def _read_episode(episode_id: str, path: Path) -> CapturedEpisode:
    calls: list[CapturedCall] = []
    score: EpisodeScore | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash mid-write
        if data.get("kind") == "call":
            calls.append(CapturedCall.from_dict(data))
        elif data.get("kind") == "score":
            score = EpisodeScore(list(data["rewards"]), str(data["source"]), float(data["created"]))
    return CapturedEpisode(episode_id, calls, score)


class CaptureSets:
    """Every capture set under one directory (``<state-dir>/captures``), each opened once."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._stores: dict[str, CaptureStore] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> CaptureStore:
        check_id(name, "capture set name", CAPTURE_NAME_PATTERN)
        with self._lock:
            if name not in self._stores:
                self._stores[name] = CaptureStore(self.root / name)
            return self._stores[name]
