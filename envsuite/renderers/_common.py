"""Machinery shared by the built-in renderers: piecewise encoding and the generic renderer.

A concrete format only says how one message and one turn header look, as :class:`Segment` s of
tokens, and how tool calls are written in an assistant turn; :class:`SegmentRenderer` derives prompts,
supervised weights, stop sequences, parsing and the multi-turn extension from that.

Tool definitions travel in the conversation: a system message at index 0 may carry ``tools`` (what
:meth:`SegmentRenderer.create_conversation_prefix_with_tools` returns, and what ``tools=`` attaches), and
each format renders them where its family expects them.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import tinker

from envsuite.chat import STANDARD_ROLES, Message, Role, StopCondition, ToolSpec, as_tool_call
from envsuite.renderers._reply import encodable_text
from envsuite.renderers._tool_text import ToolSplit, check_tool_specs, with_tools
from envsuite.renderers.base import (
    ParsedResponse,
    ParseOutcome,
    Renderer,
    SupervisedExample,
    Tokenizer,
    TrainOnWhat,
)

_ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""A role renders inside the turn header, so it must not carry markup, newlines or separators."""


class _SplittingTokenizer(Protocol):
    def encode(
        self, text: str, add_special_tokens: bool = ..., split_special_tokens: bool = ...
    ) -> list[int]: ...


@dataclass(frozen=True)
class Segment:
    """A run of tokens that belongs to one message (or to none, like a begin-of-text marker)."""

    tokens: list[int]
    message_index: int | None
    trainable: bool = False
    """True for what an assistant produces: its content and its end-of-turn marker."""


class Marker(str):
    """A format marker (``<tool_call>``) among text parts: its special token where the tokenizer has one."""

    __slots__ = ()


@dataclass(frozen=True)
class DecodedText:
    text: str
    ids_valid: bool
    """False when some id was not a token at all (negative, not an int) and was skipped."""


class TokenCodec:
    """Encodes text and special markers piece by piece, and decodes without ever raising.

    Message text is encoded with ``split_special_tokens=True`` where the tokenizer supports it, so a
    message that merely *contains* ``<|im_end|>`` (a partner's reply, a model's literal output) stays
    text and cannot forge a turn boundary. Markers map to their single special token when the tokenizer
    has one and are encoded as plain text otherwise.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._splits = _supports_split_special_tokens(tokenizer)
        self._markers: dict[str, list[int]] = {}
        # A tokenizer call costs ~0.15 ms of Python overhead; format pieces repeat in every message.
        self._literals: dict[str, list[int]] = {}
        self._special_ids: dict[str, int | None] = {}

    def text(self, text: str) -> list[int]:
        if not text:
            return []
        text = encodable_text(text)  # message text may hold lone surrogates; tokenizers reject them
        if self._splits:
            splitting = cast(_SplittingTokenizer, self.tokenizer)
            return list(splitting.encode(text, add_special_tokens=False, split_special_tokens=True))
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def literal(self, text: str) -> list[int]:
        """Like :meth:`text`, cached: for the format's own fixed pieces (role names, separators)."""
        if text not in self._literals:
            self._literals[text] = self.text(text)
        return list(self._literals[text])

    def parts(self, *parts: str) -> list[int]:
        """Text and :class:`Marker` parts as one chat template writes them: each marker that is a special
        token of this tokenizer becomes its id, and every run of text between such markers (other
        markers included, as text) is one encode call. So the pieces split exactly where the tokenizer
        splits a template's whole string, with or without the family's special tool tokens."""
        tokens: list[int] = []
        run: list[str] = []
        for part in parts:
            special = self.special_id(part) if isinstance(part, Marker) else None
            if special is None:
                run.append(str(part))
                continue
            tokens += [*self.text("".join(run)), special]
            run = []
        return tokens + self.text("".join(run))

    def marker(self, marker: str) -> list[int]:
        if marker not in self._markers:
            special = self.special_id(marker)
            self._markers[marker] = [special] if special is not None else self.text(marker)
        return list(self._markers[marker])

    def special_id(self, marker: str) -> int | None:
        """The id of ``marker`` when the tokenizer has it as one token, else None."""
        if marker not in self._special_ids:
            ids = self.tokenizer.encode(marker, add_special_tokens=False)
            single = len(ids) == 1 and self.tokenizer.decode(ids, skip_special_tokens=False) == marker
            self._special_ids[marker] = ids[0] if single else None
        return self._special_ids[marker]

    def decode(self, tokens: list[int]) -> DecodedText:
        try:
            text = self.tokenizer.decode(tokens, skip_special_tokens=False)
            return DecodedText(text, ids_valid=True)
        except (OverflowError, ValueError, TypeError, IndexError):
            pass
        # Some id is not a token at all (negative, not an int): keep what decodes, flag the rest.
        parts: list[str] = []
        for token in tokens:
            try:
                parts.append(self.tokenizer.decode([token], skip_special_tokens=False))
            except (OverflowError, ValueError, TypeError, IndexError):
                continue
        return DecodedText("".join(parts), ids_valid=False)


def _supports_split_special_tokens(tokenizer: Tokenizer) -> bool:
    try:
        cast(_SplittingTokenizer, tokenizer).encode("a", add_special_tokens=False, split_special_tokens=True)
    except TypeError:
        return False
    return True


def check_messages(messages: list[Message]) -> None:
    """Reject malformed messages with a message that says which one and why."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(
                f"message {i} is a {type(message).__name__}, expected a dict with role and content"
            )
        role = message.get("role")
        if not isinstance(role, str) or not _ROLE_NAME.fullmatch(role):
            raise ValueError(
                f"message {i} has role {role!r}; expected a speaker name such as {', '.join(STANDARD_ROLES)} "
                "(letters, digits, '_' or '-')"
            )
        if not isinstance(message.get("content"), str):
            raise TypeError(
                f"message {i} ({role}) needs str content, got {type(message.get('content')).__name__}"
            )
        thinking = message.get("thinking")
        if thinking is not None and not isinstance(thinking, str):
            raise TypeError(f"message {i} ({role}) has non-str thinking: {type(thinking).__name__}")
        _check_tool_fields(message, i, role)


def _check_tool_fields(message: Message, i: int, role: str) -> None:
    if message.get("tools") and (i != 0 or role != "system"):
        raise ValueError(f"message {i} ({role}) carries tools; only a first system message may")
    if message.get("tools"):
        check_tool_specs(message.get("tools"))
    calls = message.get("tool_calls")
    if calls:
        if role != "assistant":
            raise ValueError(f"message {i} ({role}) has tool_calls; only assistant messages may")
        for call in calls:
            as_tool_call(call)  # raises TypeError naming what is missing


def last_index_of(messages: list[Message], role: Role) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == role:
            return i
    return None


def _first_stop(text: str, stops: list[str]) -> tuple[int, str] | None:
    hits = [(pos, stop) for stop in stops if (pos := text.find(stop)) >= 0]
    return min(hits) if hits else None


class SegmentRenderer(Renderer):
    """A renderer defined by its segments; subclasses describe the format, this class does the rest.

    Subclasses set ``end_of_turn`` (the marker that closes an assistant turn and is its stop sequence)
    and implement :meth:`_render_message` and :meth:`_turn_header`; tool formats implement
    :meth:`_split_tool_calls` and render ``tool_calls``, ``tool`` messages and a system message's
    ``tools`` in :meth:`_render_message`.
    """

    end_of_turn: str

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self.codec = TokenCodec(tokenizer)
        self._stop_id = self.codec.special_id(self.end_of_turn)

    # ---- format hooks ----------------------------------------------------------------------------

    def _prefix(self, messages: list[Message]) -> list[Segment]:
        """Segments before the first message (begin-of-text, a default system message)."""
        return []

    @abstractmethod
    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        """Segments of ``messages[index]``; ``preceded`` says whether any token comes before it."""

    @abstractmethod
    def _turn_header(self, messages: list[Message], role: Role, preceded: bool) -> list[int]:
        """Tokens that open a new ``role`` turn after ``messages``."""

    def _end_of_turn_tokens(self) -> list[int]:
        return self.codec.marker(self.end_of_turn)

    def _specials(self, *markers: str) -> tuple[tuple[str, int], ...]:
        """The ``markers`` this tokenizer has as special tokens, with their ids (for :class:`CallSyntax`)."""
        found = ((m, self.codec.special_id(m)) for m in markers)
        return tuple((m, i) for m, i in found if i is not None)

    def _split_tool_calls(self, text: str) -> ToolSplit:
        """The reply's text with its tool calls taken out (the format's call syntax); never raises."""
        return ToolSplit(text)

    def _message_from_text(self, text: str) -> Message:
        return self._split_tool_calls(text).message({"role": "assistant", "content": text})

    # ---- the contract ----------------------------------------------------------------------------

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """tinker-cookbook's way in: a system message carrying ``tools``, to put before the conversation.

        Rendering ``prefix + messages`` gives the same tokens as ``messages`` rendered with ``tools=``
        and a system message ``system_prompt``.
        """
        return [{"role": "system", "content": system_prompt, "tools": check_tool_specs(tools)}]

    def render_segments(self, messages: list[Message]) -> list[Segment]:
        check_messages(messages)
        segments = self._prefix(messages)
        preceded = any(seg.tokens for seg in segments)
        for i in range(len(messages)):
            rendered = self._render_message(messages, i, preceded)
            preceded = preceded or any(seg.tokens for seg in rendered)
            segments.extend(rendered)
        return segments

    def build_generation_prompt(
        self, messages: list[Message], role: Role = "assistant", *, tools: Sequence[ToolSpec] | None = None
    ) -> tinker.ModelInput:
        messages = with_tools(messages, tools)
        segments = self.render_segments(messages)
        preceded = any(seg.tokens for seg in segments)
        tokens = [t for seg in segments for t in seg.tokens]
        return tinker.ModelInput.from_ints(tokens + self._turn_header(messages, role, preceded))

    def build_supervised_example(
        self,
        messages: list[Message],
        train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE,
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> SupervisedExample:
        train_on_what = TrainOnWhat(train_on_what)
        messages = with_tools(messages, tools)
        segments = self.render_segments(messages)
        last_assistant = last_index_of(messages, "assistant")
        if last_assistant is None:
            raise ValueError("a supervised example needs at least one assistant message to train on")
        tokens: list[int] = []
        weights_T: list[float] = []
        for seg in segments:
            trained = seg.trainable and (
                train_on_what is TrainOnWhat.ALL_ASSISTANT_MESSAGES or seg.message_index == last_assistant
            )
            tokens.extend(seg.tokens)
            weights_T.extend([1.0 if trained else 0.0] * len(seg.tokens))
        return SupervisedExample(model_input=tinker.ModelInput.from_ints(tokens), weights_T=weights_T)

    def get_stop_sequences(self) -> StopCondition:
        if self._stop_id is not None:
            return [self._stop_id]
        return [self.end_of_turn]

    def parse_response(self, tokens: list[int]) -> ParsedResponse:
        tokens = list(tokens)
        if self._stop_id is not None:
            stopped = self._stop_id in tokens
            decoded = self.codec.decode(tokens[: tokens.index(self._stop_id)] if stopped else tokens)
            text = decoded.text
        else:
            decoded = self.codec.decode(tokens)
            hit = _first_stop(decoded.text, [self.end_of_turn])
            stopped = hit is not None
            text = decoded.text[: hit[0]] if hit is not None else decoded.text
        outcome = ParseOutcome.STOP if stopped else ParseOutcome.TRUNCATED
        # Byte-level tokenizers decode broken UTF-8 to U+FFFD; a model never needs to emit that itself.
        valid_utf8 = decoded.ids_valid and "\ufffd" not in text
        return ParsedResponse(self._message_from_text(text), outcome, valid_utf8=valid_utf8)

    def build_next_prompt(
        self,
        prev_prompt: tinker.ModelInput,
        reply_tokens: list[int],
        conversation: list[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> tinker.ModelInput:
        conversation = with_tools(conversation, tools)
        last_assistant = last_index_of(conversation, "assistant")
        closed = self._close_reply(list(reply_tokens))
        if not self.has_extension_property or last_assistant is None or closed is None:
            return self.build_generation_prompt(conversation)
        check_messages(conversation)
        # Only the messages after the reply are new; earlier ones are already in prev_prompt.
        tail = [
            t
            for i in range(last_assistant + 1, len(conversation))
            for seg in self._render_message(conversation, i, preceded=True)
            for t in seg.tokens
        ]
        header = self._turn_header(conversation, "assistant", preceded=True)
        return tinker.ModelInput.from_ints(prev_prompt.to_ints() + closed + tail + header)

    def _close_reply(self, reply: list[int]) -> list[int] | None:
        """The reply cut after its stop sequence, or closed with one when truncated.

        None when a text stop sequence ends inside a token (the reply cannot be cut there), in which
        case the caller re-renders the conversation instead.
        """
        if self._stop_id is not None:
            if self._stop_id in reply:
                return reply[: reply.index(self._stop_id) + 1]
            return reply + self._end_of_turn_tokens()
        full = self.codec.decode(reply).text
        hit = _first_stop(full, [self.end_of_turn])
        if hit is None:
            return reply + self._end_of_turn_tokens()
        if hit[0] + len(hit[1]) == len(full):
            return reply
        for n in range(1, len(reply) + 1):
            text = self.codec.decode(reply[:n]).text
            if (prefix_hit := _first_stop(text, [self.end_of_turn])) is not None:
                return reply[:n] if prefix_hit[0] + len(prefix_hit[1]) == len(text) else None
        return None
