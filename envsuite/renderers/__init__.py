"""Renderers: chat messages <-> tokens for a model family (see :mod:`envsuite.renderers.base`).

``get_renderer("chatml-smollm2", tokenizer)`` builds one by name; implementations load lazily, so
importing this package does not import tinker or transformers.
"""

from envsuite.renderers._registry import get_renderer, list_renderers
from envsuite.renderers._reply import encodable_text, reply_to_tokens
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
    # text replies as tokens
    "encodable_text",
    "reply_to_tokens",
]
