"""``LocalTrainingClient``: Tinker's TrainingClient on a local PyTorch model (LoRA or full fine-tune).

Every call returns a :data:`LocalFuture` at once and runs on the client's single worker thread, so
calls take effect in the order they were made (``forward_backward`` then ``optim_step`` then a save
sees exactly those updates), as with the hosted service. Gradients accumulate over
``forward_backward`` calls until the next ``optim_step``, which applies AdamW (decoupled weight decay,
as ``torch.optim.AdamW``) with the step's ``AdamParams`` and clears them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from tinker import types

from envsuite.backends.local._futures import LocalFuture, submit
from envsuite.engine import weights as ckpt
from envsuite.engine.training import TokenBatch, build_batch, elementwise_loss, parse_loss_fn, resolve_config
from envsuite.engine.weights import LoraSpec, adapter_state, merge_lora, snapshot_full

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envsuite.engine.weights import SamplingModel

T = TypeVar("T")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_LOGIT_ROWS = 1024
"""Positions per unembedding chunk: without gradients, at most 1024 x vocab fp32 logits are alive."""


class NonFiniteError(FloatingPointError):
    """A loss, gradient or weight came out NaN or infinite.

    A NaN loss or gradient stops the call before it changes anything. Weights that an optimizer step
    made non-finite stay that way (restore a checkpoint), and no checkpoint is written from them.
    """


@dataclass(frozen=True)
class TrainingRun:
    """Identity of a training client: where its checkpoints go and what it trains."""

    run_id: str
    base_model: str
    checkpoint_root: Path
    lora: LoraSpec | None


SamplingClientFactory = Callable[["SamplingModel"], Any]
"""Builds a sampling client from a loaded model (the service passes the local sampling client)."""


class LocalTrainingClient:
    """Tinker's ``TrainingClient`` interface over one in-process model. Build it via ``LocalServiceClient``."""

    def __init__(
        self,
        model: PreTrainedModel | PeftModel,
        tokenizer: PreTrainedTokenizerBase,
        run: TrainingRun,
        make_sampling_client: SamplingClientFactory,
    ) -> None:
        from peft import PeftModel

        self._model = model
        self._peft: PeftModel | None = None
        if isinstance(model, PeftModel):
            self._peft = model
            self._lm = cast("PreTrainedModel", model.get_base_model())
        else:
            self._lm = model
        embeddings: Any = self._lm.get_input_embeddings()
        self._vocab_size = int(embeddings.num_embeddings)
        self._tokenizer = tokenizer
        self._run = run
        self._make_sampling_client = make_sampling_client
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self._param_names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._optimizer = torch.optim.AdamW(
            self._params, lr=0.0, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0, fused=True
        )
        self._step = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"envsuite-train-{run.run_id}")

    # ------------------------------------------------------------------------------------------
    # Compute
    # ------------------------------------------------------------------------------------------

    def forward(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Per-token logprobs and the loss, without gradients."""
        return self._submit(self._run_loss, list(data), loss_fn, loss_fn_config, False)

    def forward_backward(
        self,
        data: Sequence[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> LocalFuture[types.ForwardBackwardOutput]:
        """Per-token logprobs and the loss; gradients of the summed loss accumulate for ``optim_step``."""
        return self._submit(self._run_loss, list(data), loss_fn, loss_fn_config, True)

    def optim_step(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> LocalFuture[types.OptimStepResponse]:
        """One AdamW step with the accumulated gradients, then clear them."""
        if optim_params is not None and adam_params is not None:
            raise ValueError("pass optim_params or adam_params, not both")
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, types.AdamParams):
            raise TypeError(
                f"the local backend trains with AdamW: pass tinker.AdamParams, got {type(params)}"
            )
        _check_adam(params)
        return self._submit(self._run_optim_step, params)

    # ------------------------------------------------------------------------------------------
    # Checkpoints and sampling
    # ------------------------------------------------------------------------------------------

    def save_state(
        self, name: str, overwrite: bool = False, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsResponse]:
        """Save weights + optimizer state + step under ``<run>/weights/<name>``; the result's path resumes it."""
        dest = self._checkpoint_dir("weights", name, overwrite)
        return self._submit(self._run_save, dest, ckpt.CheckpointKind.STATE, user_metadata or {})

    def save_weights_for_sampler(
        self, name: str, overwrite: bool = False, user_metadata: dict[str, str] | None = None
    ) -> LocalFuture[types.SaveWeightsForSamplerResponse]:
        """Save sampling weights under ``<run>/sampler_weights/<name>`` (LoRA: the adapter only)."""
        dest = self._checkpoint_dir("sampler_weights", name, overwrite)
        return self._submit(self._run_save, dest, ckpt.CheckpointKind.SAMPLER, user_metadata or {})

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> LocalFuture[Any]:
        """A NEW sampling client with the current weights (saved to disk too when ``name`` is given).

        The client holds an in-memory snapshot; for LoRA it shares the frozen base tensors with training.
        """
        dest = None if name is None else self._checkpoint_dir("sampler_weights", name, False)
        return self._submit(self._run_snapshot_client, dest)

    def create_sampling_client(self, model_path: str) -> LocalFuture[Any]:
        """A sampling client for a saved checkpoint path."""
        return self._submit(
            lambda: self._make_sampling_client(ckpt.load_sampling_model(model_path=model_path))
        )

    def load_state(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        """Load a state checkpoint's weights; the optimizer starts fresh (Tinker semantics)."""
        return self._submit(self._run_load, path, False)

    def load_state_with_optimizer(self, path: str) -> LocalFuture[types.LoadWeightsResponse]:
        """Load a state checkpoint's weights, optimizer state and step: training resumes exactly."""
        return self._submit(self._run_load, path, True)

    def get_info(self) -> types.GetInfoResponse:
        """Model name, architecture and LoRA rank."""
        config = self._lm.config
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

    def get_tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def step(self) -> int:
        """Optimizer steps taken (restored by ``load_state_with_optimizer``)."""
        return self._step

    def close(self) -> None:
        """Finish queued calls and stop the worker thread."""
        self._executor.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------
    # Worker-thread bodies
    # ------------------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., T], *args: Any) -> LocalFuture[T]:
        return submit(self._executor, fn, *args)

    def _run_loss(
        self,
        data: list[types.Datum],
        loss_name: str,
        config: Mapping[str, float | str] | None,
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        loss_fn = parse_loss_fn(loss_name)
        resolved = resolve_config(loss_fn, config)
        pad_id = self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else 0
        batch = build_batch(data, loss_fn, self._vocab_size, int(pad_id))
        with torch.set_grad_enabled(backward):
            logprobs_N = self._target_logprobs(batch)
            loss_N = elementwise_loss(loss_fn, logprobs_N, batch.loss_inputs_N, resolved)
            total = loss_N.sum()
            if not bool(torch.isfinite(total)):
                raise NonFiniteError(
                    f"{loss_fn.value} loss is {float(total)}: check the advantages / sampler logprobs for "
                    "NaN or extreme values; no gradient was accumulated"
                )
            if backward:
                total.backward()
        outputs = []
        for logprobs_T, loss_T in zip(
            logprobs_N.detach().split(batch.lengths_D), loss_N.detach().split(batch.lengths_D), strict=True
        ):
            outputs.append(
                {
                    "logprobs": types.TensorData.from_torch(logprobs_T),
                    "elementwise_loss": types.TensorData.from_torch(loss_T),
                }
            )
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": float(total.detach())},
        )

    def _target_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """log p(target) at every datum position, datum after datum (``batch.hidden_index_N`` order).

        The unembedding runs once per distinct hidden state (a shared prefix column serves every datum
        whose path crosses it), in chunks of positions so at most ``_LOGIT_ROWS`` x vocab logits are
        alive at once.
        """
        hidden = self._lm.get_decoder()(
            input_ids=batch.input_ids_RW,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids_RW,
            use_cache=False,
        ).last_hidden_state
        hidden_flat = hidden.reshape(-1, hidden.shape[-1])
        states_M, state_of_N = torch.unique(batch.hidden_index_N, return_inverse=True)
        head = self._lm.get_output_embeddings()
        values, where = [], []
        for start in range(0, states_M.shape[0], _LOGIT_ROWS):
            logits = head(hidden_flat.index_select(0, states_M[start : start + _LOGIT_ROWS]))
            logprobs = torch.log_softmax(logits, dim=-1)
            in_chunk = ((state_of_N >= start) & (state_of_N < start + _LOGIT_ROWS)).nonzero().squeeze(1)
            values.append(logprobs[state_of_N[in_chunk] - start, batch.targets_N[in_chunk]])
            where.append(in_chunk)
        picked = torch.cat(values)
        return picked.new_zeros(batch.num_tokens).scatter(0, torch.cat(where), picked)

    def _run_optim_step(self, params: types.AdamParams) -> types.OptimStepResponse:
        grads = [p.grad for p in self._params if p.grad is not None]
        if not grads:
            raise RuntimeError("optim_step without gradients: call forward_backward first")
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if not bool(torch.isfinite(norm)):
            self._optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"gradient norm is {float(norm)}; the step was skipped and gradients cleared"
            )
        if params.grad_clip_norm > 0.0:
            torch.nn.utils.clip_grad_norm_(self._params, params.grad_clip_norm)
        for group in self._optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._step += 1
        bad = self._first_non_finite_weight()
        if bad is not None:
            raise NonFiniteError(
                f"step {self._step} made weight {bad} NaN/inf (learning rate or weight decay too large?); "
                "this client cannot be saved any more: resume from a checkpoint"
            )
        return types.OptimStepResponse(metrics={"grad_norm:mean": float(norm), "step:max": float(self._step)})

    def _first_non_finite_weight(self) -> str | None:
        for name, param in zip(self._param_names, self._params, strict=True):
            if not bool(torch.isfinite(param).all()):
                return name
        return None

    def _meta(self, kind: ckpt.CheckpointKind, user_metadata: dict[str, str]) -> ckpt.CheckpointMeta:
        return ckpt.CheckpointMeta(
            kind, self._run.base_model, self._run.lora, self._step, dict(user_metadata)
        )

    def _run_save(self, dest: Path, kind: ckpt.CheckpointKind, user_metadata: dict[str, str]) -> Any:
        bad = self._first_non_finite_weight()
        if bad is not None:
            raise NonFiniteError(f"weight {bad} holds NaN/inf; refusing to write {str(dest)!r}")

        def payload(directory: Path) -> None:
            if self._peft is not None:
                ckpt.save_adapter(directory, adapter_state(self._peft))
            else:
                ckpt.save_full_model(directory, self._lm)
            if kind is ckpt.CheckpointKind.STATE:
                ckpt.save_optimizer(
                    directory,
                    {
                        "optimizer": self._optimizer.state_dict(),
                        "param_names": self._param_names,
                        "step": self._step,
                    },
                )

        path = str(ckpt.write_checkpoint(dest, self._meta(kind, user_metadata), payload))
        if kind is ckpt.CheckpointKind.STATE:
            return types.SaveWeightsResponse(path=path)
        return types.SaveWeightsForSamplerResponse(path=path)

    def _run_snapshot_client(self, dest: Path | None) -> Any:
        path = None if dest is None else self._run_save(dest, ckpt.CheckpointKind.SAMPLER, {}).path
        model = merge_lora(self._peft) if self._peft is not None else snapshot_full(self._lm)
        return self._make_sampling_client(
            ckpt.SamplingModel(model, self._tokenizer, self._run.base_model, path)
        )

    def _run_load(self, path: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        meta = ckpt.read_meta(path, expect=ckpt.CheckpointKind.STATE)
        if meta.base_model != self._run.base_model or meta.lora != _same_shape(meta.lora, self._run.lora):
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} is for {meta.base_model} (lora={meta.lora}); this client trains "
                f"{self._run.base_model} (lora={self._run.lora})"
            )
        loaded = ckpt.load_trainable_weights(Path(path), meta)
        optimizer_state = ckpt.load_optimizer(Path(path)) if with_optimizer else None
        if optimizer_state is not None and optimizer_state.get("param_names") != self._param_names:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r}: optimizer state does not match the model's parameters"
            )
        source = dict(loaded.named_parameters())
        with torch.no_grad():
            for name, param in zip(self._param_names, self._params, strict=True):
                param.copy_(source[name])
        self._optimizer.zero_grad(set_to_none=True)
        if optimizer_state is not None:
            self._optimizer.load_state_dict(optimizer_state["optimizer"])
            self._step = int(optimizer_state["step"])
        else:
            self._optimizer.state.clear()
            self._step = 0
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


def _same_shape(saved: LoraSpec | None, current: LoraSpec | None) -> LoraSpec | None:
    """``current`` with the saved seed, so a checkpoint matches when only the init seed differs."""
    if saved is None or current is None:
        return current
    return LoraSpec(
        current.rank, saved.seed, current.train_mlp, current.train_attn, current.train_unembed, current.alpha
    )


def _check_adam(params: types.AdamParams) -> None:
    values = {
        "learning_rate": params.learning_rate,
        "beta1": params.beta1,
        "beta2": params.beta2,
        "eps": params.eps,
        "weight_decay": params.weight_decay,
        "grad_clip_norm": params.grad_clip_norm,
    }
    for key, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"AdamParams.{key} must be a finite number >= 0, got {value}")
    if not (params.beta1 < 1 and params.beta2 < 1):
        raise ValueError("AdamParams beta1 and beta2 must be < 1")
