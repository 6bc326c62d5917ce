"""The renderer contract: chat messages <-> tokens for one model family.

A renderer turns a conversation into the exact tokens a model sees (generation prompts and supervised
examples with per-token loss weights), says where sampling must stop, and parses a sampled reply back
into a message while telling a clean stop from a truncated one.

Invariants every renderer keeps:

* ``build_generation_prompt(messages)`` followed by the tokens of a reply that ends in one of
  ``get_stop_sequences()`` is exactly what ``build_supervised_example(messages + [reply])`` produces
  for those positions (sampling and training see the same tokens).
* ``has_extension_property`` is True only if, for every conversation, the generation prompt after an
  assistant turn starts with the previous generation prompt + the sampled reply tokens. Multi-turn RL
  merges such turns into one datum; the test suite checks each renderer's claim.
* Messages are rendered piece by piece (one encode call per message part), so no token ever spans a
  message boundary.
* ``parse_response`` never raises: garbage tokens and invalid UTF-8 come back as a
  :class:`ParsedResponse` with ``outcome`` telling what happened. It unpacks as tinker-cookbook's
  ``(message, termination)`` pair, so a cookbook env built with an envsuite renderer works unchanged.

Tool calling (every built-in renderer; docs/tools.md):

* Tool definitions are part of the conversation: a system message at index 0 carrying ``tools``
  (``create_conversation_prefix_with_tools`` builds one; ``tools=`` on the build methods attaches them).
  Each family renders them where it was trained to see them (a system block, the first user message).
* ``parse_response`` returns an assistant message whose ``tool_calls`` holds each call the reply made, in
  the family's syntax, as :class:`~envsuite.chat.ToolCall` (OpenAI's shape: ``id``, ``function.name``,
  ``function.arguments`` as JSON text), and whose ``unparsed_tool_calls`` holds calls it could not read
  (bad JSON, no name) with the reason; ``content`` is the text outside the calls. Call ids are derived
  from the reply's text, so the same reply gets the same ids on every machine.
* A parsed reply renders back to exactly the sampled tokens when the model wrote its calls the way the
  renderer writes them (canonical JSON), so a supervised example of a tool conversation equals the
  prompt + sampled tokens; envs build later prompts from the sampled tokens themselves
  (``build_next_prompt``), so multi-turn datums stay exact whatever the model wrote.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from envsuite.chat import Message, Role, StopCondition, ToolSpec

if TYPE_CHECKING:
    import tinker

    from envsuite.constraints import Constraint
    from envsuite.renderers._tool_grammar import CallSyntax, ToolCallRule


class Tokenizer(Protocol):
    """The slice of a HF tokenizer renderers use."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def convert_tokens_to_ids(self, tokens: str) -> int | list[int]: ...

    def __len__(self) -> int: ...


class TrainOnWhat(enum.StrEnum):
    """Which tokens of a supervised example get loss weight 1."""

    LAST_ASSISTANT_MESSAGE = "last_assistant_message"
    """Only the final assistant message (and its end-of-turn token)."""
    ALL_ASSISTANT_MESSAGES = "all_assistant_messages"
    """Every assistant message (and its end-of-turn token)."""


class ParseOutcome(enum.StrEnum):
    """How a sampled reply ended."""

    STOP = "stop"
    """The reply ended with a stop sequence (a clean end of turn)."""
    TRUNCATED = "length"
    """No stop sequence: the sampler ran out of tokens (the reply is cut off)."""


class ParseTermination(enum.StrEnum):
    """tinker-cookbook 0.5.8's ``ParseTermination`` (same values and properties): how a reply ended."""

    STOP_SEQUENCE = "stop_sequence"
    """The renderer's stop signal fired."""
    EOS = "eos"
    """The model's end-of-sequence token, accepted as a fallback (envsuite's renderers stop on their
    own stop token, so they never report it)."""
    MALFORMED = "malformed"
    """The reply did not terminate cleanly (truncated)."""

    @property
    def is_clean(self) -> bool:
        """Any clean end (what grading should gate on)."""
        return self is not ParseTermination.MALFORMED

    @property
    def is_stop_sequence(self) -> bool:
        """Only the renderer's own stop signal (a strict format gate)."""
        return self is ParseTermination.STOP_SEQUENCE


@dataclass(frozen=True)
class ParsedResponse:
    """A sampled reply as a message, and how it ended.

    It unpacks like tinker-cookbook's ``parse_response`` result, ``message, termination = parsed``
    (``termination`` a :class:`ParseTermination`), and indexes the same way (``parsed[0]`` is the
    message), while keeping envsuite's richer fields.
    """

    message: Message
    outcome: ParseOutcome
    valid_utf8: bool = True
    """False when the tokens decoded to invalid UTF-8 (replacement characters were inserted)."""

    @property
    def clean_stop(self) -> bool:
        return self.outcome is ParseOutcome.STOP

    @property
    def termination(self) -> ParseTermination:
        """tinker-cookbook's name for how the reply ended."""
        return ParseTermination.STOP_SEQUENCE if self.clean_stop else ParseTermination.MALFORMED

    def __iter__(self) -> Iterator[Message | ParseTermination]:
        return iter((self.message, self.termination))

    def __len__(self) -> int:
        return 2

    @overload
    def __getitem__(self, index: Literal[0]) -> Message: ...

    @overload
    def __getitem__(self, index: Literal[1]) -> ParseTermination: ...

    @overload
    def __getitem__(self, index: int) -> Message | ParseTermination: ...

    def __getitem__(self, index: int) -> Message | ParseTermination:
        return (self.message, self.termination)[index]


@dataclass(frozen=True)
class SupervisedExample:
    """Tokens of a whole conversation with one loss weight per token (``len(weights_T) == length``)."""

    model_input: tinker.ModelInput
    weights_T: list[float]


class Renderer(ABC):
    """Converts messages to tokens and back for one chat format."""

    name: str
    """Registry name of this renderer (e.g. ``chatml``)."""
    has_extension_property: bool
    """See the module docstring; proven per renderer in the test suite."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        """How many token ids the tokenizer decodes (ids ``0 .. vocab_size - 1``, added tokens included)."""
        return len(self.tokenizer)

    @abstractmethod
    def build_generation_prompt(
        self, messages: list[Message], role: Role = "assistant", *, tools: Sequence[ToolSpec] | None = None
    ) -> tinker.ModelInput:
        """Tokens of ``messages`` followed by the header that opens a ``role`` turn.

        ``tools``: definitions the model may call, rendered in the family's format (the same as a first
        system message carrying them).
        """

    @abstractmethod
    def build_supervised_example(
        self,
        messages: list[Message],
        train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE,
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> SupervisedExample:
        """Tokens of the whole conversation, weighting assistant tokens as ``train_on_what`` says."""

    @abstractmethod
    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """Messages to put before a conversation so the model sees ``tools`` (tinker-cookbook's method)."""

    @abstractmethod
    def get_stop_sequences(self) -> StopCondition:
        """Where sampling of an assistant turn must stop (token ids where possible)."""

    @abstractmethod
    def parse_response(self, tokens: list[int]) -> ParsedResponse:
        """Decode sampled tokens into an assistant message; never raises."""

    def build_next_prompt(
        self,
        prev_prompt: tinker.ModelInput,
        reply_tokens: list[int],
        conversation: list[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> tinker.ModelInput:
        """The prompt for the next assistant turn of a multi-turn episode.

        ``prev_prompt`` is the prompt the reply was sampled from, ``reply_tokens`` the sampled tokens and
        ``conversation`` the whole message list so far: it ends with the parsed reply followed by the new
        messages (user turns, partner answers). Renderers with the extension property override this to
        return ``prev_prompt + reply_tokens`` (plus the end-of-turn tokens when the reply was truncated)
        + the new messages + the assistant header, so the next prompt extends the previous one token for
        token and a whole episode trains as one datum. The default re-renders the conversation.
        ``tools`` as in :meth:`build_generation_prompt` (pass the same as for the first prompt).
        """
        return self.build_generation_prompt(conversation, tools=tools)

    def tool_call_syntax(self) -> CallSyntax | None:
        """How this family writes a reply's tool calls, for constrained decoding (None: not described,
        and :meth:`tool_call_constraint` refuses)."""
        return None

    def tool_call_constraint(
        self,
        tools: Sequence[ToolSpec],
        rule: ToolCallRule,
        *,
        content_schema: Mapping[str, Any] | None = None,
    ) -> Constraint:
        """The constraint under which every reply is one ``rule`` allows over ``tools``, written as this
        renderer writes calls (so ``parse_response`` reads back exactly the calls sampled): forced calls
        (``tool_choice`` required or a named function), ``strict`` arguments, and optionally a JSON
        ``content_schema`` for a reply that calls nothing. A ValueError where this family's calls are not
        described or the rule names a tool that is not offered."""
        from envsuite.constraints import Constraint
        from envsuite.renderers._tool_grammar import tool_call_grammar

        syntax = self.tool_call_syntax()
        if syntax is None:
            raise ValueError(f"renderer {self.name!r} does not describe its tool calls as a grammar")
        stops = self.get_stop_sequences()
        terminator = "" if any(isinstance(s, int) for s in stops) else next(iter(stops), "")
        return Constraint.grammar(tool_call_grammar(syntax, tools, rule, content_schema, str(terminator)))
