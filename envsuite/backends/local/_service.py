"""``LocalServiceClient``: Tinker's ServiceClient for the local backend (the factory of every client).

It takes the SDK constructor's arguments (``base_url``, ``api_key`` and the session ones are accepted
and unused: nothing leaves the machine) plus ``log_dir``, where training runs and checkpoints go. Every
public method of the installed SDK's ``ServiceClient`` is here, sync and ``_async``; like tinker 0.38
the ``create_*`` calls return a future of the client (``.result()`` or ``await`` it), which can also
be used directly as the client (deprecated, as in the SDK). Models load in the calling thread (a few
hundred ms for SmolLM2), so those futures are already done; a failure comes back in the future.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Self, TypeVar

from tinker import types
from tinker.lib.public_interfaces.custom_loss import LossHandle, PerDatumLossFn, trace_loss

from envsuite.backends.local._futures import LocalFuture, completed_future, failed_future
from envsuite.backends.local._rest import LocalRestClient
from envsuite.backends.local._runs import RunRecord, resolve_checkpoint_path
from envsuite.backends.local._sampling import LocalSamplingClient, LocalSamplingClientFuture
from envsuite.backends.local._sequences import SequenceStore
from envsuite.backends.local._shared_bases import SharedBases
from envsuite.backends.local._training import LocalTrainingClient, LocalTrainingClientFuture, TrainingRun
from envsuite.backends.local._unsupported import not_local
from envsuite.engine import weights as ckpt
from envsuite.engine.kernels import route_linears_through_onednn
from envsuite.engine.weights import LoraSpec, add_lora, fresh_seed, load_base_model

if TYPE_CHECKING:
    from tinker.lib.retry_handler import RetryConfig
    from tinker.lib.telemetry import Telemetry

T = TypeVar("T")
CloseStatus = Literal["success", "errored", "interrupted"]
_run_counter = itertools.count()


def _canonical_base(base_model: str) -> str:
    """Local directories are recorded as absolute paths, so checkpoints load from any working dir."""
    local = Path(base_model).expanduser()
    return str(local.resolve()) if local.is_dir() else base_model


def _settle(fn: Callable[[], T]) -> LocalFuture[T]:
    """Run ``fn`` now; its value or its exception comes back in a finished future."""
    try:
        return completed_future(fn())
    except Exception as exc:
        return failed_future(exc)


def _check_optimizer(method: str, optimizer: types.OptimizerConfig | None) -> None:
    if optimizer is not None and getattr(optimizer, "type", "adamw") != "adamw":
        raise not_local(method, f"optimizer {optimizer.type!r}; the local backend trains with AdamW")


class LocalServiceClient:
    """Creates local training and sampling clients; runs and checkpoints go under ``log_dir``.

    Args:
        user_metadata, project_id, display_name, base_url, api_key, default_headers_overrides: the
            SDK's session arguments, accepted so ``tinker.ServiceClient(...)`` calls work unchanged.
        log_dir: root of training runs and checkpoints (default ``<envsuite cache>/checkpoints``).
        device: where models run: ``cpu`` (default) or ``cuda``.
        onednn_products: train with the models' linear layers through oneDNN (``OneDnnLinear``: the
            same values and gradients up to float rounding, forward and backward products about twice
            as fast as ``F.linear`` on the AMD boxes; fp32 CPU layers only). False keeps ``F.linear``.
            Sampling clients choose for themselves (``EngineConfig.onednn_products``).

    The service is one session (``session_id``): sampling clients made with
    ``record_stability_info=True`` record their sequences in it, and its training clients'
    ``stable_reinforce`` reads them (in memory; they last as long as this object). Its LoRA sampling
    clients of one base model share one engine (``_shared_bases``): requests of different adapters in
    flight together decode in the same steps (multi-adapter sampling, docs/backend_sampling.md).
    """

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        device: str | None = None,
        onednn_products: bool = True,
        **kwargs: Any,
    ) -> None:
        from envsuite.models import cache_dir

        self.log_dir = Path(log_dir) if log_dir is not None else cache_dir() / "checkpoints"
        self.device = device
        """Where its models run (``cpu`` by default; ``cuda`` for a GPU)."""
        self.onednn_products = onednn_products
        self.session_id = f"local-session-{uuid.uuid4().hex[:12]}"
        self.sequences = SequenceStore().scope(self.session_id)
        """This session's sampling records (``record_stability_info``, ``stable_reinforce``)."""
        self._user_metadata = dict(user_metadata or {})
        self._shared_bases = SharedBases(device)
        """LoRA sampling clients' engines, one per base model (multi-adapter sampling)."""
        self._clients: weakref.WeakSet[LocalTrainingClient | LocalSamplingClient] = weakref.WeakSet()
        self._closed = False

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        status: CloseStatus = "success" if exc_type is None else "errored"
        self.close(status).result()

    @property
    def holder(self) -> NoReturn:
        raise not_local("ServiceClient.holder", "there is no InternalClientHolder (no HTTP session) locally")

    # ------------------------------------------------------------------------------------------
    # Training clients
    # ------------------------------------------------------------------------------------------

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClientFuture:
        """A LoRA training client on ``base_model`` (an envsuite model name or local HF dir).

        ``seed`` fixes the adapter initialization (None draws one; ``get_info``/checkpoints record it).
        """

        # Bad arguments raise here, at the call (the SDK asserts them before sending anything).
        _check_optimizer("create_lora_training_client", optimizer)
        spec = LoraSpec(rank, fresh_seed() if seed is None else seed, train_mlp, train_attn, train_unembed)
        return LocalTrainingClientFuture(
            _settle(lambda: self._training_client(base_model, spec, user_metadata))
        )

    async def create_lora_training_client_async(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        return await self.create_lora_training_client(
            base_model, rank, seed, train_mlp, train_attn, train_unembed, user_metadata, optimizer
        )

    def create_training_client(
        self,
        base_model: str,
        full_finetune: bool = True,
        seed: int | None = None,
        rank: int = 32,
        user_metadata: dict[str, str] | None = None,
    ) -> LocalTrainingClientFuture:
        """A training client that updates every weight (``full_finetune=True``), else LoRA of ``rank``.

        The local backend's extension: the hosted service trains LoRA only.
        """
        if not full_finetune:
            return self.create_lora_training_client(
                base_model, rank=rank, seed=seed, user_metadata=user_metadata
            )
        return LocalTrainingClientFuture(
            _settle(lambda: self._training_client(base_model, None, user_metadata))
        )

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClientFuture:
        """A new training run with a ``save_state`` checkpoint's weights; the optimizer starts fresh."""

        def build() -> LocalTrainingClient:
            _check_optimizer("create_training_client_from_state", optimizer)
            return self._from_state(path, base_model, user_metadata, with_optimizer=False)

        return LocalTrainingClientFuture(_settle(build))

    async def create_training_client_from_state_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state(
            path, base_model, user_metadata, weights_access_token, optimizer
        )

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalTrainingClientFuture:
        """A new training run resuming a ``save_state`` checkpoint exactly: weights, AdamW moments, step."""
        return LocalTrainingClientFuture(
            _settle(lambda: self._from_state(path, base_model, user_metadata, with_optimizer=True))
        )

    async def create_training_client_from_state_with_optimizer_async(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> LocalTrainingClient:
        return await self.create_training_client_from_state_with_optimizer(
            path, base_model, user_metadata, weights_access_token
        )

    # ------------------------------------------------------------------------------------------
    # Sampling clients, losses, weights
    # ------------------------------------------------------------------------------------------

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClientFuture:
        """A sampling client for a checkpoint path (directory or ``tinker://``) or a base model name."""
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")

        def build() -> LocalSamplingClient:
            self._check_open()
            if model_path is not None:
                directory = str(resolve_checkpoint_path(model_path, self.log_dir))
                client = LocalSamplingClient.load(model_path=directory, device=self.device)
            else:
                client = LocalSamplingClient.load(base_model=base_model, device=self.device)
            if record_stability_info:
                client.records = self.sequences
            return self._track(client)

        return LocalSamplingClientFuture(_settle(build))

    async def create_sampling_client_async(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> LocalSamplingClient:
        return await self.create_sampling_client(model_path, base_model, retry_config, record_stability_info)

    def create_custom_loss(
        self, fn: PerDatumLossFn, input_ranks: Mapping[str, types.CustomLossInputRank]
    ) -> LocalFuture[LossHandle]:
        """Trace ``fn`` (the SDK's own tracer and checks) into a handle for ``forward_backward_custom``."""
        return _settle(lambda: trace_loss(fn, input_ranks, self.session_id))

    def copy_weights(
        self, path: str, *, ttl_seconds: int | None = None, weights_access_token: str | None = None
    ) -> LocalFuture[str]:
        """Copy a checkpoint into a new (untrainable) run under this client's ``log_dir``."""
        return self.create_rest_client().copy_weights(path, ttl_seconds=ttl_seconds)

    def create_rest_client(self) -> LocalRestClient:
        """A REST client over this client's ``log_dir``: runs, checkpoints, capabilities."""
        return LocalRestClient(log_dir=self.log_dir)

    def get_server_capabilities(self) -> types.GetServerCapabilitiesResponse:
        return self.create_rest_client().get_server_capabilities().result()

    async def get_server_capabilities_async(self) -> types.GetServerCapabilitiesResponse:
        return self.get_server_capabilities()

    def get_console_url(self) -> str:
        """Where this client's runs are (there is no web console locally)."""
        return self.log_dir.resolve().as_uri()

    def get_telemetry(self) -> Telemetry | None:
        """None: the local backend sends no telemetry."""
        return None

    def close(self, status: CloseStatus = "success", detail: str | None = None) -> LocalFuture[None]:
        """End the session: every client it made stops (queued work finishes first); later calls fail."""
        if not self._closed:
            self._closed = True
            for client in list(self._clients):
                client.close()
        return completed_future(None)

    # ------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ServiceClient is closed")

    def _track(self, client: T) -> T:
        self._clients.add(client)  # type: ignore[arg-type]
        return client

    def _new_run(
        self, base_model: str, lora: LoraSpec | None, user_metadata: dict[str, str] | None
    ) -> TrainingRun:
        run_id = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_run_counter)}"
        run = TrainingRun(run_id, _canonical_base(base_model), self.log_dir, lora)
        metadata = {**self._user_metadata, **(user_metadata or {})}
        RunRecord(run_id, run.base_model, None if lora is None else lora.rank, metadata).write(self.log_dir)
        return run

    def _training_client(
        self, base_model: str, lora: LoraSpec | None, user_metadata: dict[str, str] | None
    ) -> LocalTrainingClient:
        from envsuite.models import get_tokenizer, resolve_model

        self._check_open()
        model = load_base_model(str(resolve_model(_canonical_base(base_model)).path), self.device)
        trainable = model if lora is None else add_lora(model, lora)
        if self.onednn_products:
            route_linears_through_onednn(trainable)
        run = self._new_run(base_model, lora, user_metadata)
        return self._track(
            LocalTrainingClient(
                trainable, get_tokenizer(run.base_model), run, self._sampler_of, self.sequences
            )
        )

    def _sampler_of(self, loaded: ckpt.SamplingModel, record_stability_info: bool) -> LocalSamplingClient:
        return self._track(
            LocalSamplingClient(
                loaded.model,
                loaded.tokenizer,
                loaded.base_model,
                model_path=loaded.model_path,
                shared_weights=loaded.shared_weights,
                records=self.sequences if record_stability_info else None,
                variant_of=functools.partial(self._shared_bases.variant_of, loaded),
            )
        )

    def _from_state(
        self, path: str, base_model: str | None, user_metadata: dict[str, str] | None, with_optimizer: bool
    ) -> LocalTrainingClient:
        directory = resolve_checkpoint_path(path, self.log_dir)
        meta = ckpt.read_meta(directory, expect=ckpt.CheckpointKind.STATE)
        if base_model is not None and _canonical_base(base_model) != meta.base_model:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} was trained from {meta.base_model}, not {base_model}"
            )
        client = self._training_client(meta.base_model, meta.lora, user_metadata)
        load = client.load_state_with_optimizer if with_optimizer else client.load_state
        load(str(directory)).result()
        return client
