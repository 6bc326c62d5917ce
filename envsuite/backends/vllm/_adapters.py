"""An envsuite LoRA sampler checkpoint as a peft adapter directory, the format vLLM loads.

The local backend saves a LoRA policy as ``adapter.safetensors`` (``{module}.lora_A`` [r, in] and
``{module}.lora_B`` [out, r], by base-module name) beside ``envsuite_checkpoint.json`` (rank, alpha,
targets). peft names the same matrices ``base_model.model.{module}.lora_{A,B}.weight`` and describes
them in ``adapter_config.json``; the numbers are copied unchanged (numpy, no torch here), and the scale
``alpha / rank`` is the same on both sides.

vLLM does not apply a LoRA to ``lm_head`` (its unembedding is shared with the input embedding in the
models shipped here), so a checkpoint that trained it is refused: train with ``train_unembed=False``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsuite.errors import UsageError

CHECKPOINT_META = "envsuite_checkpoint.json"
ADAPTER_FILE = "adapter.safetensors"
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class PeftAdapter:
    """A peft adapter directory written for vLLM."""

    path: Path
    rank: int
    base_model: str
    step: int


def write_peft_adapter(files: Mapping[str, bytes], dest: Path, base_model_path: str) -> PeftAdapter:
    """Write the LoRA sampler checkpoint ``files`` (bytes by file name) to ``dest`` in peft's format.

    ``base_model_path`` is what the adapter config names as its base (the directory vLLM serves).
    Raises :class:`~envsuite.errors.UsageError` for a full fine-tune or a LoRA on ``lm_head``.
    """
    from safetensors.numpy import load, save_file

    meta = json.loads(files[CHECKPOINT_META])
    lora = meta.get("lora")
    if lora is None:
        raise UsageError("a vLLM sampler takes LoRA policies only (lora_rank >= 1), not a full fine-tune")
    if lora.get("train_unembed"):
        raise UsageError(
            "vLLM applies no LoRA to lm_head: train with train_unembed=False (--no-unembed-lora) "
            "to sample on vLLM"
        )
    state = load(files[ADAPTER_FILE])
    targets = sorted({name.rsplit(".", 2)[-2] for name in state})
    renamed = {f"base_model.model.{name}.weight": array for name, array in state.items()}
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_path,
        "r": int(lora["rank"]),
        "lora_alpha": int(lora["alpha"]),
        "lora_dropout": 0.0,
        "target_modules": targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    dest.mkdir(parents=True, exist_ok=True)
    save_file(renamed, str(dest / PEFT_WEIGHTS))
    (dest / PEFT_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return PeftAdapter(dest, int(lora["rank"]), str(meta["base_model"]), int(meta.get("step", 0)))
