"""The trainer's view of a compute backend: a few typed calls over the Tinker client interface.

The local backend and the hosted SDK return different (but call-compatible) client and future types;
this module is the one place that holds them (as the unions ``envsuite.backends`` names), and every call
here awaits its future.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tinker

from envsuite.errors import UsageError

if TYPE_CHECKING:
    from tinker.types import LossFnType
    from transformers import PreTrainedTokenizerBase

    from envsuite.backends import SamplingClient, ServiceClient, TrainingClient
    from envsuite.backends.local import LocalServiceClient, LocalTrainingClient
    from envsuite.trainers._config import TrainConfig


@dataclass(frozen=True)
class SavedCheckpoint:
    state_path: str
    sampler_path: str


REPLICA_WEIGHTS = "replica-weights"
"""The sampler checkpoint name the trainer rewrites after each step to feed sampler replicas."""


@dataclass(frozen=True)
class SamplerWeights:
    """A sampler checkpoint's files by name (``checkpoint.json`` and the adapter or the model)."""

    files: dict[str, bytes]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.files.values())


class NonFiniteLoss(FloatingPointError):
    """The trainer saw a NaN/inf loss."""


@dataclass(frozen=True)
class TrainOutput:
    """What one ``forward_backward`` returned: learner logprobs per datum and the loss sum."""

    logprobs_D: list[np.ndarray]
    loss_sum: float


def make_service(config: TrainConfig) -> ServiceClient:
    """The backend's service client (local: checkpoints under ``log_dir/checkpoints``)."""
    from envsuite.backends import make_service_client

    if config.policy.backend == "local":
        return make_service_client("local", log_dir=str(Path(config.log_dir) / "checkpoints"))
    return make_service_client(
        config.policy.backend, **({"base_url": config.policy.base_url} if config.policy.base_url else {})
    )


class PolicyClients:
    """A training client and the current sampling client on its weights."""

    def __init__(self, training: TrainingClient, record_samples: bool = False) -> None:
        self._training = training
        self._sampler: SamplingClient | None = None
        self._record_samples = record_samples
        """Samplers record every sequence (``record_stability_info``): the ``stable_reinforce`` loss reads them."""

    @classmethod
    async def create(
        cls, service: ServiceClient, config: TrainConfig, resume_state: str | None
    ) -> PolicyClients:
        if resume_state is not None:
            training = await service.create_training_client_from_state_with_optimizer(resume_state)
        elif config.policy.lora_rank == 0:
            training = await _local_service(service, "full fine-tuning").create_training_client(
                config.policy.model, full_finetune=True, seed=config.steps.seed
            )
        else:
            training = await service.create_lora_training_client(
                config.policy.model,
                rank=config.policy.lora_rank,
                seed=config.steps.seed,
                train_unembed=config.policy.train_unembed,
            )
        return cls(training, record_samples=config.loss.loss_fn == "stable_reinforce")

    def tokenizer(self) -> PreTrainedTokenizerBase:
        tok: PreTrainedTokenizerBase = self._training.get_tokenizer()
        return tok

    async def refresh_sampler(self) -> SamplingClient:
        """A new sampling client on the current weights; the old one is closed and dropped first, so
        the two snapshots (a model copy each, locally) never coexist. Callers drop theirs first too."""
        self._close_sampler()
        self._sampler = await self._training.save_weights_and_get_sampling_client(
            record_stability_info=self._record_samples
        )
        return self._sampler

    async def forward(self, data: list[tinker.Datum]) -> list[np.ndarray]:
        """The learner's logprobs of each datum's targets (no gradient; the loss is ignored)."""
        plain = [
            tinker.Datum(
                model_input=d.model_input, loss_fn_inputs={"target_tokens": d.loss_fn_inputs["target_tokens"]}
            )
            for d in data
        ]
        out = await self._training.forward(plain, "cross_entropy")
        return [np.asarray(o["logprobs"].to_numpy(), dtype=np.float32) for o in out.loss_fn_outputs]

    async def new_sampler(self) -> SamplingClient:
        """A new sampling client on the current weights, leaving the previous ones alone: async training
        keeps sampling with the old one until its groups finish (the caller closes it)."""
        return await self._training.save_weights_and_get_sampling_client(
            record_stability_info=self._record_samples
        )

    async def sampler_weights(self) -> SamplerWeights:
        """The current sampling weights as files (LoRA: the adapter only), for sampler replicas.

        Local backend only (a fixed checkpoint name, overwritten each time, local extension)."""
        local = _local_training(self._training, "sampler replicas")
        saved = await local.save_weights_for_sampler(REPLICA_WEIGHTS, overwrite=True)
        directory = Path(str(saved.path))
        files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
        return SamplerWeights(files)

    async def forward_backward(
        self, data: list[tinker.Datum], loss_fn: LossFnType, loss_fn_config: dict[str, float] | None
    ) -> TrainOutput:
        out = await self._training.forward_backward(data, loss_fn, loss_fn_config)
        logprobs = [np.asarray(o["logprobs"].to_numpy(), dtype=np.float32) for o in out.loss_fn_outputs]
        return TrainOutput(logprobs, float(out.metrics.get("loss:sum", float("nan"))))

    async def optim_step(self, params: tinker.AdamParams) -> dict[str, float]:
        response = await self._training.optim_step(params)
        return dict(response.metrics or {})

    async def save(self, name: str) -> SavedCheckpoint:
        state = await self._training.save_state(name)
        sampler = await self._training.save_weights_for_sampler(name)
        return SavedCheckpoint(str(state.path), str(sampler.path))

    def close(self) -> None:
        self._close_sampler()
        close = getattr(self._training, "close", None)
        if callable(close):
            close()

    def _close_sampler(self) -> None:
        close = getattr(self._sampler, "close", None)
        if callable(close):
            close()
        self._sampler = None


def _local_service(service: ServiceClient, feature: str) -> LocalServiceClient:
    """``service`` as the local backend's, for a local-only extension (TrainConfig refuses ``feature``
    on other backends before a client exists, so this only guards the type)."""
    from envsuite.backends.local import LocalServiceClient

    if not isinstance(service, LocalServiceClient):
        raise UsageError(f"{feature} runs on the local backend only")
    return service


def _local_training(training: TrainingClient, feature: str) -> LocalTrainingClient:
    """``training`` as the local backend's, for a local-only extension (see :func:`_local_service`)."""
    from envsuite.backends.local import LocalTrainingClient

    if not isinstance(training, LocalTrainingClient):
        raise UsageError(f"{feature} run on the local backend only")
    return training
