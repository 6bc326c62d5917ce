"""Renderers: chat messages <-> tokens for a model family (see :mod:`envsuite.renderers.base`).

Tool calling is part of every renderer: ``build_generation_prompt(messages, tools=specs)`` shows the
tools in the family's format and ``parse_response(tokens).message["tool_calls"]`` holds the calls a reply
made (docs/tools.md).

``get_renderer("chatml-smollm2", tokenizer)`` builds one by name; implementations load lazily, so
importing this package does not import tinker or transformers.
"""

from envsuite.renderers._registry import get_renderer, list_renderers
from envsuite.renderers._reply import (
    encodable_text,
    reply_message_text,
    reply_message_tokens,
    reply_to_tokens,
)
from envsuite.renderers._tool_grammar import CallSyntax, ToolCallRule, ToolChoice
from envsuite.renderers.base import (
    ParsedResponse,
    ParseOutcome,
    ParseTermination,
    Renderer,
    SupervisedExample,
    Tokenizer,
    TrainOnWhat,
)

__all__ = [
    # contract
    "Renderer",
    "Tokenizer",
    # results and options
    "ParseOutcome",
    "ParsedResponse",
    "ParseTermination",
    "SupervisedExample",
    "TrainOnWhat",
    # lookup
    "get_renderer",
    "list_renderers",
    # tool calls as a grammar (constrained decoding)
    "CallSyntax",
    "ToolCallRule",
    "ToolChoice",
    # replies written as text or messages, as tokens
    "encodable_text",
    "reply_message_tokens",
    "reply_message_text",
    "reply_to_tokens",
]
