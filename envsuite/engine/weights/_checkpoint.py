"""Checkpoints of the local backend: plain directories, written atomically, referenced by path.

A checkpoint directory holds ``envsuite_checkpoint.json`` (written last, so its presence means the rest
is complete) and the weights:

* LoRA: ``adapter.safetensors`` with only the adapter matrices; the base model is named in the JSON
  and loaded from ``envsuite.models`` (45 MB for SmolLM2 at rank 32 on every layer, against 538 MB for the model).
* full fine-tune: an HF model directory (``config.json`` + ``model.safetensors``) that any HF loader
  (and ``envsuite.models.resolve_model``) also reads.

``kind`` is ``sampler`` (weights for sampling) or ``state`` (weights + ``optimizer.pt`` with the AdamW
moments and the step counter, enough to resume training exactly). Paths follow the hosted service's
layout: ``<root>/<run id>/sampler_weights/<name>`` and ``<root>/<run id>/weights/<name>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch

from envsuite.engine.weights._lora import (
    LoraFactors,
    LoraSpec,
    LoraSpecJson,
    add_lora,
    load_adapter_state,
    load_base_model,
    lora_factors,
    merge_lora,
)
from envsuite.errors import UsageError
from envsuite.models import CHECKPOINT_META_FILE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from peft import PeftModel
    from torch.optim.optimizer import StateDict
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

META_FILE = CHECKPOINT_META_FILE
ADAPTER_FILE = "adapter.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
FORMAT_VERSION = 1


class CheckpointKind(StrEnum):
    """What a checkpoint is for."""

    SAMPLER = "sampler"
    """Weights for sampling only."""
    STATE = "state"
    """Weights, optimizer state and step: training resumes from it exactly."""


class CheckpointError(UsageError):
    """A checkpoint path that is missing, incomplete, corrupt or of the wrong kind."""


class CheckpointMetaJson(TypedDict):
    """``envsuite_checkpoint.json`` as :meth:`CheckpointMeta.to_json` writes it."""

    format_version: int
    kind: str
    """A :class:`CheckpointKind` value."""
    base_model: str
    lora: LoraSpecJson | None
    step: int
    user_metadata: dict[str, str]
    expires_at: str | None
    """ISO 8601, or None."""


class OptimizerFile(TypedDict):
    """What ``optimizer.pt`` of a state checkpoint holds."""

    optimizer: StateDict
    """The AdamW moments and step counts (``torch.optim.Optimizer.state_dict``)."""
    param_names: list[str]
    """The trained parameters in the optimizer's order, to refuse a state saved for another model."""
    step: int


@dataclass(frozen=True)
class CheckpointMeta:
    """The JSON record of a checkpoint."""

    kind: CheckpointKind
    base_model: str
    lora: LoraSpec | None
    step: int
    user_metadata: dict[str, str] = field(default_factory=dict)
    expires_at: datetime | None = None
    """When the writer asked the checkpoint to expire (``ttl_seconds``); recorded, never enforced."""

    def to_json(self) -> CheckpointMetaJson:
        return {
            "format_version": FORMAT_VERSION,
            "kind": self.kind.value,
            "base_model": self.base_model,
            "lora": None if self.lora is None else self.lora.to_json(),
            "step": self.step,
            "user_metadata": self.user_metadata,
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
        }

    @staticmethod
    def from_json(data: CheckpointMetaJson) -> CheckpointMeta:
        """The record ``data`` spells; a malformed one raises KeyError, TypeError or ValueError (which
        :func:`read_meta` reports as a corrupt checkpoint)."""
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unsupported format_version {data.get('format_version')!r}")
        lora = data["lora"]
        return CheckpointMeta(
            kind=CheckpointKind(data["kind"]),
            base_model=str(data["base_model"]),
            lora=None if lora is None else LoraSpec.from_json(lora),
            step=int(data["step"]),
            user_metadata={str(k): str(v) for k, v in dict(data.get("user_metadata") or {}).items()},
            expires_at=datetime.fromisoformat(expires)
            if isinstance(expires := data.get("expires_at"), str)
            else None,
        )

    def with_expiry(self, expires_at: datetime | None) -> CheckpointMeta:
        return dataclasses.replace(self, expires_at=expires_at)

    def required_files(self) -> list[str]:
        files = [ADAPTER_FILE] if self.lora is not None else ["config.json", "model.safetensors"]
        if self.kind is CheckpointKind.STATE:
            files.append(OPTIMIZER_FILE)
        return files


@dataclass(frozen=True)
class SamplingModel:
    """A model ready for sampling (fp32, eval mode, no gradients) with its tokenizer."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    base_model: str
    model_path: str | None
    """The checkpoint the weights came from (None: the base model's own weights)."""
    shared_weights: frozenset[int] = frozenset()
    """Ids of tensors ``model`` shares with another live model (a LoRA snapshot's frozen base, still
    trained around): a sampling engine must leave them as they are (``reorder_frozen_linears``)."""
    lora: LoraFactors | None = None
    """For LoRA weights, the adapter merged into ``model`` (its factors on the base weights): sampling
    clients of adapters of one base model then share one engine and decode in the same steps
    (multi-adapter sampling, ``envsuite.engine.sampling._variants``). None: plain weights."""


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def write_checkpoint(dest: Path, meta: CheckpointMeta, write_payload: Callable[[Path], None]) -> Path:
    """Write a checkpoint to ``dest``: payload and JSON into a temp dir, then one rename.

    An existing ``dest`` is replaced; a crash at any point leaves either the old checkpoint or none.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        write_payload(tmp)
        (tmp / META_FILE).write_text(json.dumps(meta.to_json(), indent=2) + "\n")
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def rewrite_meta(directory: Path, meta: CheckpointMeta) -> None:
    """Replace a complete checkpoint's JSON (atomically: a crash leaves the old one)."""
    read_meta(directory)
    tmp = directory / f".{META_FILE}.tmp"
    tmp.write_text(json.dumps(meta.to_json(), indent=2) + "\n")
    os.replace(tmp, directory / META_FILE)


def save_adapter(directory: Path, state: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file(state, str(directory / ADAPTER_FILE))


def save_full_model(directory: Path, model: PreTrainedModel) -> None:
    model.save_pretrained(str(directory))


def save_optimizer(directory: Path, state: OptimizerFile) -> None:
    torch.save(state, directory / OPTIMIZER_FILE)


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def read_meta(path: str | os.PathLike[str], expect: CheckpointKind | None = None) -> CheckpointMeta:
    """Read and check a checkpoint's JSON and that every file it needs is there."""
    directory = Path(path)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {str(directory)!r} does not exist (or is not a directory)")
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise CheckpointError(f"checkpoint {str(directory)!r} is incomplete: {META_FILE} is missing")
    try:
        meta = CheckpointMeta.from_json(json.loads(meta_path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {str(directory)!r} has a corrupt {META_FILE}: {exc}") from exc
    missing = [name for name in meta.required_files() if not (directory / name).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {str(directory)!r} is incomplete: missing {', '.join(missing)}")
    if expect is not None and meta.kind is not expect:
        raise CheckpointError(
            f"checkpoint {str(directory)!r} is a {meta.kind.value} checkpoint; a {expect.value} checkpoint "
            "is needed here (save_state writes those)"
        )
    return meta


def load_adapter(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(directory / ADAPTER_FILE))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"checkpoint {str(directory)!r}: {ADAPTER_FILE} is corrupt ({exc})") from exc
    _check_finite(directory, state.items())
    return state


def load_optimizer(directory: Path) -> OptimizerFile:
    try:
        state: OptimizerFile = torch.load(directory / OPTIMIZER_FILE, weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {str(directory)!r}: {OPTIMIZER_FILE} is corrupt ({exc})") from exc
    return state


def load_trainable_weights(
    directory: Path, meta: CheckpointMeta, device: str | None = None
) -> PreTrainedModel | PeftModel:
    """The checkpoint's model as training starts from it: peft-wrapped for LoRA, plain for full."""
    from envsuite.models import resolve_model

    if meta.lora is None:
        try:
            model = load_base_model(str(directory), device)
        except (OSError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint {str(directory)!r}: model weights are corrupt ({exc})"
            ) from exc
        _check_finite(directory, model.named_parameters())
        return model
    adapter = load_adapter(directory)
    peft_model = add_lora(load_base_model(str(resolve_model(meta.base_model).path), device), meta.lora)
    try:
        load_adapter_state(peft_model, adapter)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {str(directory)!r}: {exc}") from exc
    return peft_model


def load_sampling_model(
    base_model: str | None = None, model_path: str | None = None, device: str | None = None
) -> SamplingModel:
    """A model for sampling: ``base_model`` by name, or a checkpoint at ``model_path`` (LoRA merged in).

    Exactly one of the two is given. The tokenizer is the base model's.
    """
    from envsuite.models import get_tokenizer, resolve_model

    if (base_model is None) == (model_path is None):
        raise ValueError("pass exactly one of base_model or model_path")
    if base_model is not None:
        model = load_base_model(str(resolve_model(base_model).path), device)
        model.requires_grad_(False)
        return SamplingModel(model, get_tokenizer(base_model), base_model, None)
    assert model_path is not None
    meta = read_meta(model_path)
    from peft import PeftModel

    loaded = load_trainable_weights(Path(model_path), meta, device)
    # Nothing else holds the loaded tensors: the engine may lay out every one (no shared weights).
    model, lora = (
        (merge_lora(loaded), lora_factors(loaded)) if isinstance(loaded, PeftModel) else (loaded, None)
    )
    model.requires_grad_(False)
    tokenizer = get_tokenizer(meta.base_model)
    return SamplingModel(model, tokenizer, meta.base_model, str(model_path), frozenset(), lora)


def _check_finite(directory: Path, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    for name, tensor in tensors:
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"checkpoint {str(directory)!r}: weight {name} holds NaN or inf values")
