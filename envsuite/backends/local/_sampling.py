"""``LocalSamplingClient``: the Tinker SDK's SamplingClient interface over a local PyTorch model.

Methods and arguments follow ``tinker.SamplingClient`` (0.38): ``sample`` returns a future of a real
``tinker.SampleResponse``, ``compute_logprobs`` a future of per-token prompt logprobs. Every request
goes to one :class:`~envsuite.engine.sampling._engine.SamplingEngine` per client, which batches
concurrent requests (see that module). A request that cannot be served (an over-long prompt, bad
settings, an option the local backend lacks) comes back as a future that raises a clear error; it
never affects other requests.

Stop semantics (``SamplingParams.stop``): ``None`` stops at the tokenizer's end-of-sequence token(s);
``[]`` disables stopping (sampling runs to ``max_tokens``); a string or a list of strings stops once the
decoded sampled text contains one of them; a list of ints stops at any of those token ids. An explicit
list replaces the end-of-sequence default. The returned tokens include the stop token(s).

Constraints (envsuite's extension, docs/backend_sampling.md "Constrained sampling"): ``sample`` takes a
:class:`~envsuite.constraints.Constraint` as ``constraint=`` or inside ``ConstrainedSamplingParams``;
every sample then belongs to its language, and comes back as a ``ConstrainedSampledSequence``.
"""

from __future__ import annotations

import itertools
import os
import uuid
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tinker
from tinker.lib.public_interfaces.backcompat_client_future import BackcompatClientFuture

from envsuite.backends._topk import topk_matrices
from envsuite.backends.local._constrained import ConstrainedSampledSequence, constraint_of
from envsuite.backends.local._futures import LocalFuture, failed_future
from envsuite.backends.local._sequences import SequenceScope
from envsuite.backends.local._unsupported import not_local
from envsuite.constraints import Constraint
from envsuite.engine import limit_heap_fragmentation
from envsuite.engine.kernels import ReorderReport
from envsuite.engine.sampling import (
    EngineConfig,
    EngineRequest,
    EngineResult,
    GeneratedSequence,
    KVStats,
    PrefixCacheStats,
    SampledToken,
    SamplingEngine,
    StopMatcher,
)

if TYPE_CHECKING:
    from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture
    from tinker.lib.queue_state_logger import QueueState
    from tinker.lib.retry_handler import RetryConfig
    from tinker.lib.telemetry import Telemetry
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

VariantSource = Callable[[Callable[[list[int]], str]], "tuple[SamplingEngine, int] | None"]
"""Given the client's token decoder: a shared engine and the client's variant of it, or None."""
_UNSUPPORTED = "the local sampling backend does not support {} (only the hosted Tinker service does)"
MAX_TOPK_SAMPLE_LOGPROBS = 20
"""The most ``topk_sample_logprobs`` a request may ask for (as OpenAI's ``top_logprobs``)."""
_SNAPSHOT = "snapshot:"
_PATH = "path:"
_BASE = "base:"
_live_snapshots: weakref.WeakValueDictionary[str, LocalSamplingClient] = weakref.WeakValueDictionary()
"""In-memory sampling clients by handle, so ``from_sampler_handle`` finds them in this process."""


class LocalSamplingClient:
    """Samples from an in-memory model; a drop-in for ``tinker.SamplingClient``.

    The client takes ownership of ``model`` (its engine thread runs it in eval/inference mode and
    replaces its linear layers by faster ones, ``EngineConfig.reorder_weights``): pass a copy if the
    same weights are being trained, or name the tensors still shared with a live model in
    ``shared_weights`` (ids), which are then left as they are.

    ``variant_of`` (a session's LoRA snapshots, ``_shared_bases``) puts ``model`` on an engine shared with
    other adapters of the same base model, whose rows then decode in the same steps; it returns None
    where that does not apply, and the client gets an engine of its own.

    Every sampled sequence gets a ``sequence_id`` unique to this client; with ``records`` (a session's
    :class:`SequenceScope`, what ``record_stability_info=True`` gives) each is also recorded there before
    its response is handed out, for ``stable_reinforce`` training.
    """

    _ids = itertools.count()

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        base_model: str,
        *,
        model_path: str | None = None,
        config: EngineConfig | None = None,
        base_weights: bool = False,
        shared_weights: Collection[int] = (),
        records: SequenceScope | None = None,
        variant_of: VariantSource | None = None,
    ) -> None:
        limit_heap_fragmentation()  # prefill and KV-cache tensors fragment glibc's heap otherwise
        self._tokenizer = tokenizer
        self._base_model = base_model
        self.model_path = model_path
        """The checkpoint path these weights came from (None for base weights)."""
        # The engine gets a decoder closed over the tokenizer, not a method of this client: a bound
        # method would make client and engine a reference cycle, and a dropped client (with its model
        # and KV caches) would then wait for Python's cyclic garbage collector to be freed.
        shared = None if variant_of is None else variant_of(_token_decoder(tokenizer))
        if shared is None:
            self._engine = SamplingEngine(model, _token_decoder(tokenizer), config, shared_weights, tokenizer)
            self._variant = 0
        else:
            # A variant of a shared multi-adapter engine (``_shared_bases``): removed with this client.
            self._engine, self._variant = shared
            weakref.finalize(self, self._engine.remove_variant, self._variant)
        self._client_id = next(self._ids)
        # Random, so ids stay distinct across clients and processes (records outlive a process).
        self._sequence_prefix = f"seq-{uuid.uuid4().hex[:12]}"
        self._sequence_ids = itertools.count()
        self.records = records
        """Where sampled sequences are recorded (``record_stability_info``); None records nothing."""
        self._eos_ids = _eos_token_ids(model, tokenizer)
        if model_path is not None:
            self._handle = _PATH + str(model_path)
        elif base_weights:
            self._handle = _BASE + base_model
        else:
            self._handle = f"{_SNAPSHOT}{os.getpid()}:{self._client_id}"
            _live_snapshots[self._handle] = self

    @classmethod
    def load(
        cls,
        base_model: str | None = None,
        model_path: str | None = None,
        *,
        config: EngineConfig | None = None,
        device: str | None = None,
    ) -> LocalSamplingClient:
        """Sample from ``base_model`` (a model name, local dir or hub id) or a checkpoint at ``model_path``."""
        from envsuite.engine.weights import load_sampling_model

        loaded = load_sampling_model(base_model=base_model, model_path=model_path, device=device)
        return cls(
            loaded.model,
            loaded.tokenizer,
            loaded.base_model,
            model_path=loaded.model_path,
            config=config,
            base_weights=model_path is None,
        )

    @property
    def max_context(self) -> int:
        """Prompt plus sampled tokens at most."""
        return self._engine.max_context

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The token ids ``SamplingParams(stop=None)`` stops at (the model's end of sequence)."""
        return self._eos_ids

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    def get_base_model(self) -> str:
        return self._base_model

    async def get_base_model_async(self) -> str:
        return self._base_model

    def get_sampler_handle(self) -> str:
        """A string that names these weights for :meth:`from_sampler_handle`.

        Checkpoint and base-model clients get a handle any process can load; an in-memory snapshot
        (``save_weights_and_get_sampling_client()`` without a name) gets one that works in this process.
        """
        return self._handle

    @staticmethod
    def from_sampler_handle(handle: str, *, api_key: str | None = None) -> LocalSamplingClient:
        """The sampling client a :meth:`get_sampler_handle` string names (``api_key`` is not needed locally)."""
        if handle.startswith(_SNAPSHOT):
            live = _live_snapshots.get(handle)
            if live is None:
                raise ValueError(
                    f"sampler handle {handle!r} names in-memory weights of another process (or a closed "
                    "client); save them with a name (save_weights_and_get_sampling_client(name)) to share them"
                )
            return live
        if handle.startswith(_PATH):
            return LocalSamplingClient.load(model_path=handle[len(_PATH) :])
        if handle.startswith(_BASE):
            return LocalSamplingClient.load(base_model=handle[len(_BASE) :])
        raise ValueError(f"{handle!r} is not a local sampler handle (get_sampler_handle() makes them)")

    @staticmethod
    def create(
        holder: Any,
        *,
        model_path: str | None = None,
        base_model: str | None = None,
        sampling_session_id: str | None = None,
        retry_config: RetryConfig | None = None,
        record_stability_info: bool = False,
    ) -> AwaitableConcurrentFuture[LocalSamplingClient]:
        raise not_local(
            "SamplingClient.create",
            "it opens a sampling session through the SDK's InternalClientHolder (a hosted session); "
            "use LocalServiceClient.create_sampling_client",
        )

    def on_queue_state_change(self, queue_state: QueueState, queue_state_reason: str | None) -> None:
        """Nothing to do: the local engine has no server-side queue to report on."""

    def get_telemetry(self) -> Telemetry | None:
        """None: the local backend sends no telemetry."""
        return None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickles as its handle: checkpoint and base-model clients reload in another process."""
        return (LocalSamplingClient.from_sampler_handle, (self._handle,))

    def close(self) -> None:
        """Stop the engine (or this client's variant of a shared one); requests still in flight fail
        with ``EngineClosedError``."""
        if self._variant:
            self._engine.remove_variant(self._variant)
        else:
            self._engine.close()

    def prefix_cache_stats(self) -> PrefixCacheStats:
        """What the engine's prefix cache (KV reused across the turns of an episode) served and holds."""
        return self._engine.prefix_cache_stats(self._variant)

    def clear_prefix_cache(self) -> None:
        """Forget the cached conversations (their KV is freed at once): for a caller that knows none of
        them comes back, such as a benchmark moving on to its next env. Requests in flight are unaffected."""
        self._engine.clear_prefix_cache()

    def kv_stats(self) -> KVStats:
        """What the engine's running batch took in KV cache (peaks, and admissions the budget held back)."""
        return self._engine.kv_stats()

    def reorder_report(self) -> ReorderReport | None:
        """Which of the model's linear layers the engine put on re-laid-out weights (oneDNN's reordered
        blocks, envsuite's panels: the layouts the kernel calibration chose) and which it left plain;
        None where it did not try (``onednn_products`` off)."""
        variant = self._engine.variants.by_id.get(self._variant)
        return None if variant is None else variant.reorder_report

    def compile_constraint(self, constraint: Constraint) -> None:
        """Compile ``constraint`` for this model's tokenizer now (cached; ``sample`` would on submit):
        raises :class:`~envsuite.constraints.ConstraintError` with the reason if it cannot be used. For
        servers that refuse a bad schema before they answer, and to keep a first compile off a hot path."""
        assert self._engine.grammars is not None
        self._engine.grammars.compile(constraint)

    def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: tinker.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
        *,
        on_token: Callable[[SampledToken], None] | None = None,
        constraint: Constraint | None = None,
    ) -> LocalFuture[tinker.SampleResponse]:
        """Sample ``num_samples`` continuations of ``prompt`` (one shared prefill).

        ``topk_sample_logprobs`` (at most :data:`MAX_TOPK_SAMPLE_LOGPROBS`) fills each sequence's
        ``topk_logprobs``: the most likely tokens at each sampled position under the distribution sampled
        from (docs/backend_sampling.md). ``on_token`` (envsuite's extension, for streaming) is called on
        the engine's thread with each token as it is sampled; it must return quickly. ``constraint``
        (envsuite's extension, or ``ConstrainedSamplingParams.constraint``) restricts every sample to its
        language; a constraint that cannot be compiled fails the future with ``ConstraintError``.
        """
        unsupported = {
            "topk_prompt_logprobs": topk_prompt_logprobs != 0,
            "target_prompt_logprobs": target_prompt_logprobs is not None,
            "prompt_alt_tokens_k": prompt_alt_tokens_k != 0,
        }
        for option, used in unsupported.items():
            if used:
                return failed_future(NotImplementedError(_UNSUPPORTED.format(option)))
        try:
            request = self._build_request(
                prompt,
                num_samples,
                sampling_params,
                include_prompt_logprobs,
                topk_sample_logprobs,
                constraint_of(sampling_params, constraint),
            )
            _check_last_n(prompt_logprobs_last_n, include_prompt_logprobs, len(request.prompt_T))
        except (ValueError, TypeError) as exc:
            return failed_future(exc)

        prompt_length = len(request.prompt_T)

        def convert(result: EngineResult) -> tinker.SampleResponse:
            response = self._to_response(result, prompt_logprobs_last_n)
            if self.records is not None:
                self.records.record_response(prompt_length, response)
            return response

        return LocalFuture(self._engine.submit(request, convert, on_token, self._variant))

    async def sample_async(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: tinker.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> tinker.SampleResponse:
        """:meth:`sample`, awaited: the response itself (as the SDK's ``sample_async``)."""
        return await self.sample(
            prompt,
            num_samples,
            sampling_params,
            include_prompt_logprobs,
            topk_prompt_logprobs,
            topk_sample_logprobs,
            target_prompt_logprobs,
            prompt_alt_tokens_k,
            prompt_logprobs_last_n,
            constraint=constraint,
        )

    async def compute_logprobs_async(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> list[float | None]:
        return await self.compute_logprobs(prompt, prompt_logprobs_last_n)

    def compute_logprobs(
        self, prompt: tinker.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> LocalFuture[list[float | None]]:
        """Logprob of each prompt token given the ones before it (``None`` for the first token)."""
        try:
            tokens = _prompt_tokens(prompt)
            _check_last_n(prompt_logprobs_last_n, True, len(tokens))
        except (ValueError, TypeError) as exc:
            return failed_future(exc)
        request = EngineRequest(prompt_T=tokens, num_samples=1, max_tokens=0, prompt_logprobs=True)

        def convert(result: EngineResult) -> list[float | None]:
            assert result.prompt_logprobs is not None
            return _keep_last_n(result.prompt_logprobs, prompt_logprobs_last_n)

        return LocalFuture(self._engine.submit(request, convert, variant=self._variant))

    # ------------------------------------------------------------------ helpers

    def _build_request(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        params: tinker.SamplingParams,
        include_prompt_logprobs: bool,
        topk_sample_logprobs: int = 0,
        constraint: Constraint | None = None,
    ) -> EngineRequest:
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        if not 0 <= topk_sample_logprobs <= MAX_TOPK_SAMPLE_LOGPROBS:
            raise ValueError(
                f"topk_sample_logprobs must be in [0, {MAX_TOPK_SAMPLE_LOGPROBS}], got {topk_sample_logprobs}"
            )
        max_tokens = (
            self._engine.config.default_max_tokens if params.max_tokens is None else params.max_tokens
        )
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if params.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {params.temperature}")
        if not 0 < params.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
        return EngineRequest(
            prompt_T=_prompt_tokens(prompt),
            num_samples=num_samples,
            max_tokens=max_tokens,
            temperature=float(params.temperature),
            top_k=int(params.top_k),
            top_p=float(params.top_p),
            seed=params.seed,
            stop=self._stop_matcher(params.stop),
            prompt_logprobs=include_prompt_logprobs,
            top_logprobs=topk_sample_logprobs,
            constraint=constraint,
        )

    def _to_sequence(self, seq: GeneratedSequence) -> tinker.SampledSequence:
        fields = _sequence_fields(seq, f"{self._sequence_prefix}-{next(self._sequence_ids)}")
        if seq.constrained_logprobs is None:
            return tinker.SampledSequence(**fields)
        return ConstrainedSampledSequence(
            **fields,
            constrained_logprobs_np=np.asarray(seq.constrained_logprobs, dtype=np.float32),
            constraint_outcome=seq.constraint_outcome,
        )

    def _stop_matcher(self, stop: str | Sequence[str] | Sequence[int] | None) -> StopMatcher:
        if stop is None:
            return StopMatcher.build(self._eos_ids, ())
        if isinstance(stop, str):
            stop = [stop]
        if all(isinstance(s, str) for s in stop):
            strings = tuple(str(s) for s in stop)
            if any(not s for s in strings):
                raise ValueError("stop strings must be non-empty")
            return StopMatcher.build(frozenset(), strings)
        if all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
            return StopMatcher.build(frozenset(int(s) for s in stop), ())
        raise TypeError(f"stop must be strings or token ids, not a mix: {list(stop)!r}")

    def _to_response(self, result: EngineResult, last_n: int | None) -> tinker.SampleResponse:
        sequences = [self._to_sequence(seq) for seq in result.sequences]
        prompt_logprobs_np = None
        if result.prompt_logprobs is not None:
            kept = _keep_last_n(result.prompt_logprobs, last_n)
            prompt_logprobs_np = np.asarray([np.nan if x is None else x for x in kept], dtype=np.float32)
        return tinker.SampleResponse(
            sequences=sequences,
            prompt_logprobs_np=prompt_logprobs_np,
            prompt_cache_hit_tokens=result.prompt_cache_hit_tokens,
        )


def _sequence_fields(seq: GeneratedSequence, sequence_id: str) -> dict[str, Any]:
    return {
        "stop_reason": seq.finish.value,
        "sequence_id": sequence_id,
        "tokens_np": np.asarray(seq.tokens, dtype=np.int32),
        "logprobs_np": np.asarray(seq.logprobs, dtype=np.float32),
        "topk_logprobs_np": None if seq.top_logprobs is None else topk_matrices(seq.top_logprobs),
    }


def _token_decoder(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[int]], str]:
    def decode(tokens: list[int]) -> str:
        return str(tokenizer.decode(tokens, skip_special_tokens=False))

    return decode


def _prompt_tokens(prompt: tinker.ModelInput) -> tuple[int, ...]:
    if not isinstance(prompt, tinker.ModelInput):
        raise TypeError(f"prompt must be a tinker.ModelInput, got {type(prompt).__name__}")
    try:
        return tuple(prompt.to_ints())
    except ValueError as exc:
        raise ValueError(f"the local backend samples from token-only prompts: {exc}") from exc


def _check_last_n(last_n: int | None, include_prompt_logprobs: bool, prompt_length: int) -> None:
    if last_n is None:
        return
    if not include_prompt_logprobs:
        raise ValueError("prompt_logprobs_last_n needs include_prompt_logprobs=True")
    if not 1 <= last_n <= prompt_length - 1:
        raise ValueError(f"prompt_logprobs_last_n must be in [1, {prompt_length - 1}], got {last_n}")


def _keep_last_n(logprobs: list[float | None], last_n: int | None) -> list[float | None]:
    if last_n is None:
        return list(logprobs)
    cut = len(logprobs) - last_n
    return [None] * cut + list(logprobs[cut:])


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    generation_config = getattr(model, "generation_config", None)
    for source in (getattr(generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list):
            ids.update(int(x) for x in source)
    return frozenset(ids)


class LocalSamplingClientFuture(BackcompatClientFuture[LocalSamplingClient]):
    """What the local calls that make a sampling client return, as the SDK's ``BackcompatSamplingClientFuture``.

    ``.result()`` or ``await`` gives the client; using the future itself as the client still works,
    forwarded to the finished client with the SDK's deprecation warning.
    """
