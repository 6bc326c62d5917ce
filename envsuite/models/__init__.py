"""Model names that resolve offline: the embedded SmolLM2, a tiny random test model, or any local HF dir.

Heavy libraries (torch, transformers) load only when a model or tokenizer is actually materialized.
"""

from envsuite.models._resolve import (
    CHECKPOINT_META_FILE,
    KNOWN_MODELS,
    ModelCard,
    ResolvedModel,
    UnknownModelError,
    base_model_name,
    cache_dir,
    default_renderer_name,
    get_tokenizer,
    is_checkpoint_dir,
    resolve_model,
)

__all__ = [
    "CHECKPOINT_META_FILE",
    "KNOWN_MODELS",
    "ModelCard",
    "ResolvedModel",
    "UnknownModelError",
    "base_model_name",
    "cache_dir",
    "default_renderer_name",
    "get_tokenizer",
    "is_checkpoint_dir",
    "resolve_model",
]
