"""Stand-ins for the Qwen3 and Llama 3 tokenizers, built offline from SmolLM2's (tests only).

What a renderer's token-for-token check depends on is where the tokenizer splits a template's string:
at its special tokens, and by its pre-tokenizer pattern. A stand-in keeps SmolLM2's byte-level BPE
vocabulary but takes the family's special tokens and split pattern (the ones in the family's
``tokenizer.json``) and the family's chat template (``chat_templates/``), so ``apply_chat_template``
tokenizes the way the real tokenizer would split it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envsuite.models import get_tokenizer

TEMPLATES = Path(__file__).parent / "chat_templates"

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)
"""The split pattern of Qwen2/2.5/3's tokenizer.json (one digit per piece)."""
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)
"""The split pattern of Llama 3's tokenizer.json (up to three digits per piece)."""

FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3": {
        "pattern": QWEN2_PATTERN,
        "special": [
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        ],
        "template": "qwen3.jinja",
        "bos": None,
    },
    "llama3": {
        "pattern": LLAMA3_PATTERN,
        "special": [
            "<|begin_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        "template": "llama3_2.jinja",
        "bos": "<|begin_of_text|>",
    },
}


def family_tokenizer(family: str) -> Any:
    """SmolLM2's vocabulary with ``family``'s special tokens, split pattern and chat template."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILIES[family]
    base = get_tokenizer("tiny-random")
    backend = Tokenizer.from_str(base.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec["pattern"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    tokenizer.add_special_tokens({"additional_special_tokens": spec["special"]})
    if spec["bos"] is not None:
        tokenizer.bos_token = spec["bos"]
    tokenizer.chat_template = (TEMPLATES / spec["template"]).read_text(encoding="utf-8")
    return tokenizer
