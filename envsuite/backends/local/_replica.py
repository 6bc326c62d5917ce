"""What a sampler replica needs of the local engine, as one small API: policy weights (a sampler
checkpoint's files, bytes by name) in, a :class:`LocalSamplingClient` out.

The trainer's sampler replicas (``envsuite.trainers.sampling``) run their own engine; they reach it only
through :class:`ReplicaWeights` and :func:`check_sampler_checkpoint`, so the trainer imports nothing of
``envsuite.engine``. A LoRA run sends the adapter only (a few MB): the base model is loaded on the first
update and kept, and each new adapter is merged into it, as the trainer's own snapshots are built. A
full fine-tune sends the whole model, loaded as a checkpoint.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.backends.local._sampling import LocalSamplingClient

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

    from envsuite.engine.weights import CheckpointMeta, LoraSpec


def check_sampler_checkpoint(path: str) -> None:
    """Raise :class:`~envsuite.engine.weights.CheckpointError` (a ``ValueError``) unless ``path`` is a
    checkpoint whose metadata loads (the trainer checks its KL reference before any model loads)."""
    from envsuite.engine.weights import read_meta

    read_meta(path)


class ReplicaWeights:
    """One replica's policy weights: the base model kept from the first LoRA update, and a sampling
    client built on each new version. Not thread-safe: one update at a time (a replica's own order)."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device
        self._peft: PeftModel | None = None
        self._lora: LoraSpec | None = None

    def client(self, files: Mapping[str, bytes]) -> LocalSamplingClient:
        """A sampling client on the weights in ``files`` (a sampler checkpoint's files by name)."""
        from envsuite.engine.weights import CheckpointMeta, load_sampling_model
        from envsuite.models import CHECKPOINT_META_FILE, get_tokenizer

        meta = CheckpointMeta.from_json(json.loads(files[CHECKPOINT_META_FILE]))
        if meta.lora is None:  # full fine-tune: the whole model travels; load it as a checkpoint
            with tempfile.TemporaryDirectory(prefix="envsuite-replica-") as tmp:
                for name, data in files.items():
                    (Path(tmp) / name).write_bytes(data)
                loaded = load_sampling_model(model_path=tmp, device=self.device)
            return LocalSamplingClient(loaded.model, loaded.tokenizer, loaded.base_model)
        model, shared = self._merged(meta, files)
        return LocalSamplingClient(
            model, get_tokenizer(meta.base_model), meta.base_model, shared_weights=shared
        )

    def _merged(
        self, meta: CheckpointMeta, files: Mapping[str, bytes]
    ) -> tuple[PreTrainedModel, frozenset[int]]:
        """The base model with the adapter merged in, as the trainer's own snapshots are built."""
        from safetensors.torch import load as load_safetensors

        from envsuite.engine.kernels import route_linears_through_onednn
        from envsuite.engine.weights import add_lora, load_adapter_state, load_base_model, merge_lora
        from envsuite.models import resolve_model

        assert meta.lora is not None  # client() loads full fine-tunes as checkpoints instead
        if self._peft is None or self._lora != meta.lora:
            base = load_base_model(str(resolve_model(meta.base_model).path), self.device)
            base.requires_grad_(False)
            self._peft = add_lora(base, meta.lora)
            route_linears_through_onednn(self._peft)
            self._lora = meta.lora
        [adapter_file] = [n for n in meta.required_files() if n in files]
        load_adapter_state(self._peft, load_safetensors(files[adapter_file]))
        shared = frozenset(id(p) for p in self._peft.parameters())
        return merge_lora(self._peft), shared
