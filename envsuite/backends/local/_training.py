"""``LocalTrainingClient``: Tinker's TrainingClient on a local PyTorch model (LoRA or full fine-tune).

Every public method of the installed SDK's ``TrainingClient`` is here with its arguments, sync and
``_async`` (the async twins return what the SDK's do: a future for compute calls, the value for
``get_info_async``, the client for the ``create``/``save ... sampling_client`` calls). Every call
returns at once and runs on the client's single worker thread, so calls take effect in the order they
were made (``forward_backward`` then ``optim_step`` then a save sees exactly those updates), as with
the hosted service. Gradients accumulate over ``forward_backward`` calls until the next
``optim_step``, which applies AdamW (decoupled weight decay, as ``torch.optim.AdamW``) with the step's
``AdamParams`` and clears them. What cannot work locally raises :class:`NotImplementedError` naming
the method and why (listed in docs/backend.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tinker import types
from tinker.lib.public_interfaces.backcompat_client_future import BackcompatClientFuture
from tinker.lib.public_interfaces.custom_loss import LossHandle, check_loss_inputs, run_loss_handle

from envsuite.backends.local._futures import LocalFuture, submit
from envsuite.backends.local._runs import resolve_checkpoint_path
from envsuite.backends.local._sampling import LocalSamplingClient, LocalSamplingClientFuture
from envsuite.backends.local._sequences import SequenceScope
from envsuite.backends.local._trainer_core import (
    CustomLoss,
    NonFiniteError,
    TrainerCore,
    TrainingRun,
    check_adam,
)
from envsuite.backends.local._unsupported import not_local
from envsuite.engine import limit_heap_fragmentation, release_free_memory
from envsuite.engine import weights as ckpt

if TYPE_CHECKING:
    from peft import PeftModel
    from tinker.lib.retry_handler import RetryConfig
    from tinker.lib.telemetry import Telemetry
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envsuite.engine.weights import SamplingModel

__all__ = ["LocalTrainingClient", "LocalTrainingClientFuture", "NonFiniteError", "TrainingRun"]

T = TypeVar("T")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

SamplingClientFactory = Callable[["SamplingModel", bool], LocalSamplingClient]
"""Builds a sampling client from a loaded model, recording its samples when the flag says so
(``record_stability_info``); the service passes its own."""


class LocalTrainingClient:
    """Tinker's ``TrainingClient`` interface over one in-process model. Build it via ``LocalServiceClient``."""

    def __init__(
        self,
        model: PreTrainedModel | PeftModel,
        tokenizer: PreTrainedTokenizerBase,
        run: TrainingRun,
        make_sampling_client: SamplingClientFactory,
        sequences: SequenceScope | None = None,
    ) -> None:
        limit_heap_fragmentation()  # training passes fragment glibc's heap otherwise (engine._memory)
        self._core = TrainerCore(model, tokenizer, run)
        self._run = run
        self._make_sampling_client = make_sampling_client
        self._sequences = sequences
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"envsuite-train-{run.run_id}")
        self._closed = False
        self.model_id: str = run.run_id
        """The training run id (the SDK's ``model_id``); checkpoints live under ``<log_dir>/<model_id>``."""

    # ------------------------------------------------------------------------------------------
    # Compute
    # ------------------------------------------------------------------------------------------

    def forward(
        self,
        data: Sequence[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Per-token logprobs and the loss, without gradients."""
        return self._submit(self._core.run_loss, list(data), loss_fn, loss_fn_config, False, self._sequences)

    async def forward_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward(data, loss_fn, loss_fn_config)

    def forward_backward(
        self,
        data: Sequence[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Per-token logprobs and the loss; gradients of the summed loss accumulate for ``optim_step``.

        ``loss_fn="stable_reinforce"`` reads each datum's provenance and the sampling records of this
        client's session (see ``_sequences.py``).
        """
        return self._submit(self._core.run_loss, list(data), loss_fn, loss_fn_config, True, self._sequences)

    async def forward_backward_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward_backward(data, loss_fn, loss_fn_config)

    def forward_backward_custom(
        self,
        data: Sequence[types.Datum],
        loss_fn: CustomLoss | LossHandle,
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """A loss of your own over the per-datum target logprobs (a callable or a ``LossHandle``).

        ``loss_fn(data, logprobs_D) -> (loss, metrics)``; ``logprobs_D[i]`` has the shape of datum
        ``i``'s ``target_tokens`` and carries gradients, so the loss's backward accumulates as
        ``forward_backward``'s does. A ``LossHandle`` from ``create_custom_loss`` runs its traced graph.
        """
        if loss_type_input not in (None, "logprobs"):
            raise ValueError(f"loss_type_input must be 'logprobs' or None, got {loss_type_input!r}")
        batch = list(data)
        loss: CustomLoss
        if isinstance(loss_fn, LossHandle):
            check_loss_inputs(loss_fn, batch)
            handle = loss_fn

            def loss(d: list[types.Datum], lp: list[Any]) -> Any:
                return run_loss_handle(handle, d, lp)
        else:
            loss = loss_fn
        return self._submit(self._core.run_custom_loss, batch, loss)

    async def forward_backward_custom_async(
        self,
        data: Sequence[types.Datum],
        loss_fn: CustomLoss | LossHandle,
        *,
        loss_type_input: Literal["logprobs"] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        return self.forward_backward_custom(data, loss_fn, loss_type_input=loss_type_input)

    def optim_step(
        self, optim_params: types.OptimParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture[types.OptimStepResponse]:
        """One AdamW step with the accumulated gradients, then clear them."""
        if optim_params is not None and adam_params is not None:
            raise ValueError("pass optim_params or adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if params is not None and not isinstance(params, types.AdamParams):
            kind = getattr(params, "type", type(params).__name__)
            raise not_local("optim_step", f"the {kind!r} optimizer; the local backend trains with AdamW")
        if not isinstance(params, types.AdamParams):
            raise TypeError(
                f"the local backend trains with AdamW: pass tinker.AdamParams, got {type(params)}"
            )
        check_adam(params)
        return self._submit(self._core.optim_step, params)

    async def optim_step_async(
        self, optim_params: types.OptimParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture[types.OptimStepResponse]:
        return self.optim_step(optim_params, adam_params=adam_params)

    # ------------------------------------------------------------------------------------------
    # Checkpoints
    # ------------------------------------------------------------------------------------------

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture[types.SaveWeightsResponse]:
        """Save weights + optimizer state + step under ``<run>/weights/<name>``; the result's path resumes it.

        ``ttl_seconds`` is recorded as the checkpoint's ``expires_at``; local checkpoints are never
        deleted on their own.
        """
        dest = self._checkpoint_dir("weights", name, overwrite)

        def save() -> types.SaveWeightsResponse:
            path = self._core.save(dest, ckpt.CheckpointKind.STATE, user_metadata or {}, ttl_seconds)
            return types.SaveWeightsResponse(path=str(path))

        return self._submit(save)

    async def save_state_async(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalFuture[types.SaveWeightsResponse]:
        return self.save_state(name, ttl_seconds, overwrite, user_metadata)

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
        *,
        overwrite: bool = False,
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        """Save sampling weights under ``<run>/sampler_weights/<name>`` (LoRA: the adapter only).

        ``overwrite`` is a local extension (the SDK has none here); an existing name fails without it.
        """
        dest = self._checkpoint_dir("sampler_weights", name, overwrite)

        def save() -> types.SaveWeightsForSamplerResponse:
            path = self._core.save(dest, ckpt.CheckpointKind.SAMPLER, user_metadata or {}, ttl_seconds)
            return types.SaveWeightsForSamplerResponse(path=str(path))

        return self._submit(save)

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        return self.save_weights_for_sampler(name, ttl_seconds, user_metadata)

    def save_weights_external(
        self, name: str, ttl_seconds: int | None = None, age_encryption_recipients: list[str] | None = None
    ) -> LocalFuture[types.SaveWeightsExternalResponse]:
        raise not_local(
            "save_weights_external",
            "it exports age-encrypted weights to the hosted service's storage; local checkpoints are "
            "already plain files (save_weights_for_sampler)",
        )

    async def save_weights_external_async(
        self, name: str, ttl_seconds: int | None = None, age_encryption_recipients: list[str] | None = None
    ) -> LocalFuture[types.SaveWeightsExternalResponse]:
        return self.save_weights_external(name, ttl_seconds, age_encryption_recipients)

    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """Load a state checkpoint's weights; the optimizer starts fresh (Tinker semantics)."""
        return self._submit(self._run_load, path, False)

    async def load_state_async(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        return self.load_state(path, weights_access_token)

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        """Load a state checkpoint's weights, optimizer state and step: training resumes exactly."""
        return self._submit(self._run_load, path, True)

    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> LocalFuture[types.LoadWeightsResponse]:
        return self.load_state_with_optimizer(path, weights_access_token)

    # ------------------------------------------------------------------------------------------
    # Sampling clients
    # ------------------------------------------------------------------------------------------

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalSamplingClientFuture:
        """A NEW sampling client with the current weights (saved to disk too when ``name`` is given).

        The client holds an in-memory snapshot; for LoRA it shares the frozen base tensors with training.
        ``record_stability_info=True``: every sequence it samples is recorded for ``stable_reinforce``.
        """
        _check_sampler_kind("save_weights_and_get_sampling_client", kind)
        dest = None if name is None else self._checkpoint_dir("sampler_weights", name, False)

        def snapshot() -> LocalSamplingClient:
            path = None
            if dest is not None:
                path = str(self._core.save(dest, ckpt.CheckpointKind.SAMPLER, {}, None))
            return self._make_sampling_client(self._core.sampling_snapshot(path), record_stability_info)

        return LocalSamplingClientFuture(self._submit(snapshot))

    async def save_weights_and_get_sampling_client_async(
        self,
        name: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> LocalSamplingClient:
        return await self.save_weights_and_get_sampling_client(
            name, retry_config, record_stability_info, kind
        )

    def create_sampling_client(
        self, model_path: str, retry_config: RetryConfig | None = None, record_stability_info: bool = False
    ) -> LocalSamplingClientFuture:
        """A sampling client for a saved checkpoint path (a directory or ``tinker://`` path)."""
        directory = str(resolve_checkpoint_path(model_path, self._run.checkpoint_root))

        def load() -> LocalSamplingClient:
            return self._make_sampling_client(
                ckpt.load_sampling_model(model_path=directory), record_stability_info
            )

        return LocalSamplingClientFuture(self._submit(load))

    async def create_sampling_client_async(
        self, model_path: str, retry_config: RetryConfig | None = None, record_stability_info: bool = False
    ) -> LocalSamplingClient:
        return await self.create_sampling_client(model_path, retry_config, record_stability_info)

    # ------------------------------------------------------------------------------------------
    # Information
    # ------------------------------------------------------------------------------------------

    def get_info(self) -> types.GetInfoResponse:
        """Model name, architecture and LoRA rank."""
        config = self._core.lm.config
        arch = (getattr(config, "architectures", None) or [config.model_type])[0]
        lora = self._run.lora
        return types.GetInfoResponse(
            model_data=types.ModelData(
                arch=arch, model_name=self._run.base_model, tokenizer_id=self._run.base_model
            ),
            model_id=self._run.run_id,
            is_lora=lora is not None,
            lora_rank=None if lora is None else lora.rank,
            model_name=self._run.base_model,
        )

    async def get_info_async(self) -> types.GetInfoResponse:
        return self.get_info()

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        return self._core.tokenizer

    def get_console_url(self) -> str:
        """Where this run's checkpoints are (there is no web console locally)."""
        return (self._run.checkpoint_root / self._run.run_id).resolve().as_uri()

    def get_telemetry(self) -> Telemetry | None:
        """None: the local backend sends no telemetry."""
        return None

    def bind_sequence_records(self, sequences: SequenceScope) -> None:
        """Read ``stable_reinforce`` records from ``sequences`` (a local extension: ``envsuite serve``, which
        runs every session's models through one service, binds each model to its own session's records)."""
        self._sequences = sequences

    @property
    def step(self) -> int:
        """Optimizer steps taken (restored by ``load_state_with_optimizer``)."""
        return self._core.step

    def close(self) -> None:
        """Finish queued calls and stop the worker thread (a local extension); later calls fail."""
        self._closed = True
        self._executor.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., T], *args: Any) -> LocalFuture[T]:
        if self._closed:
            raise RuntimeError(f"training client {self.model_id} is closed (its ServiceClient was closed?)")
        return submit(self._executor, _then_release_memory, fn, *args)

    def _run_load(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        self._core.load(resolve_checkpoint_path(path, self._run.checkpoint_root), with_optimizer)
        return types.LoadWeightsResponse(path=path, model_id=self._run.run_id)

    def _checkpoint_dir(self, segment: str, name: str, overwrite: bool) -> Path:
        if not _NAME_RE.match(name):
            raise ValueError(
                f"checkpoint name {name!r} must be letters, digits, '.', '_' or '-' (no slashes)"
            )
        dest = self._run.checkpoint_root / self._run.run_id / segment / name
        if dest.exists() and not overwrite:
            raise ckpt.CheckpointError(f"checkpoint {str(dest)!r} already exists (pass overwrite=True)")
        return dest


class LocalTrainingClientFuture(BackcompatClientFuture[LocalTrainingClient]):
    """What the local ``create_*training_client*`` calls return: a future of the client.

    As the SDK's ``BackcompatTrainingClientFuture``: ``.result()`` or ``await`` gives the client; using
    the future itself as the client (``fut.forward_backward(...)``) still works, forwarded to the
    finished client with the SDK's deprecation warning.
    """


def _check_sampler_kind(method: str, kind: str) -> None:
    if kind != "snapshot":
        raise not_local(
            method,
            f"kind={kind!r}: local sampling clients hold a fixed snapshot; ask for a new one after each update",
        )


def _then_release_memory(fn: Callable[..., T], *args: Any) -> T:
    """Run one call, then hand the memory it freed (activations, logits, merged copies) back to the OS."""
    try:
        return fn(*args)
    finally:
        release_free_memory()
