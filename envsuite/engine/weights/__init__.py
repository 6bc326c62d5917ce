"""Weights: base models in fp32, LoRA adapters through peft (merged for sampling), checkpoint directories."""

from envsuite.engine.weights._checkpoint import (
    CheckpointError,
    CheckpointKind,
    CheckpointMeta,
    SamplingModel,
    load_optimizer,
    load_sampling_model,
    load_trainable_weights,
    read_meta,
    rewrite_meta,
    save_adapter,
    save_full_model,
    save_optimizer,
    write_checkpoint,
)
from envsuite.engine.weights._lora import (
    LoraSpec,
    adapter_state,
    add_lora,
    fresh_seed,
    load_adapter_state,
    load_base_model,
    merge_lora,
    snapshot_full,
)

__all__ = [
    # models and LoRA
    "LoraSpec",
    "adapter_state",
    "add_lora",
    "fresh_seed",
    "load_adapter_state",
    "load_base_model",
    "merge_lora",
    "snapshot_full",
    # checkpoints
    "CheckpointError",
    "CheckpointKind",
    "CheckpointMeta",
    "SamplingModel",
    "load_optimizer",
    "load_sampling_model",
    "load_trainable_weights",
    "read_meta",
    "rewrite_meta",
    "save_adapter",
    "save_full_model",
    "save_optimizer",
    "write_checkpoint",
]
