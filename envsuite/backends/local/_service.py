"""``LocalServiceClient``: Tinker's ServiceClient for the local backend (the factory of every client).

Its ``create_*`` methods have the hosted client's call shapes and, like tinker 0.38, return a future
of the client: ``client = service.create_lora_training_client(...).result()`` or ``await`` it.
Models load synchronously (a few hundred ms for SmolLM2), so those futures are already done.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.backends.local._futures import LocalFuture, completed_future
from envsuite.backends.local._training import LocalTrainingClient, TrainingRun
from envsuite.engine import weights as ckpt
from envsuite.engine.weights import LoraSpec, add_lora, fresh_seed, load_base_model

if TYPE_CHECKING:
    from envsuite.backends.local._sampling import LocalSamplingClient

_run_counter = itertools.count()


def _sampling_client(loaded: ckpt.SamplingModel) -> LocalSamplingClient:
    from envsuite.backends.local._sampling import LocalSamplingClient

    return LocalSamplingClient(
        loaded.model, loaded.tokenizer, loaded.base_model, model_path=loaded.model_path
    )


def _canonical_base(base_model: str) -> str:
    """Local directories are recorded as absolute paths, so checkpoints load from any working dir."""
    local = Path(base_model).expanduser()
    return str(local.resolve()) if local.is_dir() else base_model


class LocalServiceClient:
    """Creates local training and sampling clients; checkpoints go under ``log_dir``.

    Args:
        log_dir: root of checkpoint directories (default ``<envsuite cache>/checkpoints``).
    """

    def __init__(self, log_dir: str | os.PathLike[str] | None = None) -> None:
        from envsuite.models import cache_dir

        self.log_dir = Path(log_dir) if log_dir is not None else cache_dir() / "checkpoints"

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture[LocalTrainingClient]:
        """A LoRA training client on ``base_model`` (an envsuite model name or local HF dir).

        ``seed`` fixes the adapter initialization (None draws one; ``get_info``/checkpoints record it).
        """
        spec = LoraSpec(rank, fresh_seed() if seed is None else seed, train_mlp, train_attn, train_unembed)
        return completed_future(self._training_client(base_model, spec))

    def create_training_client(
        self, base_model: str, full_finetune: bool = True, seed: int | None = None, rank: int = 32
    ) -> LocalFuture[LocalTrainingClient]:
        """A training client that updates every weight (``full_finetune=True``), else LoRA of ``rank``.

        The local backend's extension: the hosted service trains LoRA only.
        """
        if not full_finetune:
            return self.create_lora_training_client(base_model, rank=rank, seed=seed)
        return completed_future(self._training_client(base_model, None))

    def create_training_client_from_state(
        self, path: str, base_model: str | None = None
    ) -> LocalFuture[LocalTrainingClient]:
        """A training client with a ``save_state`` checkpoint's weights; the optimizer starts fresh."""
        return completed_future(self._from_state(path, base_model, with_optimizer=False))

    def create_training_client_from_state_with_optimizer(
        self, path: str, base_model: str | None = None
    ) -> LocalFuture[LocalTrainingClient]:
        """A training client resuming a ``save_state`` checkpoint exactly: weights, AdamW moments, step."""
        return completed_future(self._from_state(path, base_model, with_optimizer=True))

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> LocalFuture[LocalSamplingClient]:
        """A sampling client for a checkpoint path or a base model name (exactly one of the two)."""
        return completed_future(_sampling_client(ckpt.load_sampling_model(base_model, model_path)))

    # ------------------------------------------------------------------------------------------

    def _new_run(self, base_model: str, lora: LoraSpec | None) -> TrainingRun:
        run_id = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_run_counter)}"
        return TrainingRun(run_id, _canonical_base(base_model), self.log_dir, lora)

    def _training_client(self, base_model: str, lora: LoraSpec | None) -> LocalTrainingClient:
        from envsuite.models import get_tokenizer, resolve_model

        run = self._new_run(base_model, lora)
        model = load_base_model(str(resolve_model(run.base_model).path))
        trainable = model if lora is None else add_lora(model, lora)
        return LocalTrainingClient(trainable, get_tokenizer(run.base_model), run, _sampling_client)

    def _from_state(self, path: str, base_model: str | None, with_optimizer: bool) -> LocalTrainingClient:
        meta = ckpt.read_meta(path, expect=ckpt.CheckpointKind.STATE)
        if base_model is not None and _canonical_base(base_model) != meta.base_model:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} was trained from {meta.base_model}, not {base_model}"
            )
        client = self._training_client(meta.base_model, meta.lora)
        load = client.load_state_with_optimizer if with_optimizer else client.load_state
        load(path).result()
        return client
