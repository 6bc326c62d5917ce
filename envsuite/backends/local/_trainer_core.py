"""The training side of one local training client: model, optimizer, step, and what each call computes.

Everything here runs on the client's single worker thread (see ``_training.py``), one call at a time,
so no locking is needed and calls take effect in submission order.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.utils.checkpoint
from tinker import types

from envsuite.backends.local._sequences import SequenceScope, provenance_inputs
from envsuite.engine import weights as ckpt
from envsuite.engine.training import (
    LOSS_SPECS,
    LossFn,
    LossInputError,
    TokenBatch,
    build_batch,
    check_data,
    elementwise_loss,
    lay_out,
    parse_loss_fn,
    resolve_config,
    target_logprobs,
    training_passes,
)
from envsuite.engine.weights import LoraSpec, adapter_state, lora_factors, merge_lora, snapshot_full

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_RECOMPUTE_TOKENS = 512
"""Passes with more row tokens than this recompute each decoder layer during backward instead of keeping
its activations (about 4 MB per token on SmolLM2, attention weights included); shorter passes keep
them, which is faster."""
_PASS_TOKENS = 2048
"""Row tokens per forward/backward pass. Activations kept for backward grow with a pass's tokens (and
attention over a token-tree row with its width squared): a GRPO batch of long multi-turn games laid
out in one pass took over 15 GB on SmolLM2, so longer batches run in passes of whole rows."""

CustomLoss = Callable[[list[types.Datum], list[torch.Tensor]], tuple[torch.Tensor, Mapping[str, float]]]
"""A custom loss as the SDK's ``forward_backward_custom`` takes it: ``(data, logprobs_list) -> (loss, metrics)``."""


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


class TrainerCore:
    """One model being trained: forward/backward, AdamW steps, saves and loads."""

    def __init__(
        self, model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, run: TrainingRun
    ) -> None:
        from peft import PeftModel

        self.peft: PeftModel | None = None
        if isinstance(model, PeftModel):
            self.peft = model
            self.lm = cast("PreTrainedModel", model.get_base_model())
        else:
            self.lm = model
        embeddings: Any = self.lm.get_input_embeddings()
        self.vocab_size = int(embeddings.num_embeddings)
        self.tokenizer = tokenizer
        self.run = run
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.param_names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=0.0, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0, fused=True
        )
        self.step = 0

    # ------------------------------------------------------------------------------------------
    # Losses
    # ------------------------------------------------------------------------------------------

    def run_loss(
        self,
        data: list[types.Datum],
        loss_name: str,
        config: Mapping[str, float | str] | None,
        backward: bool,
        sequences: SequenceScope | None = None,
    ) -> types.ForwardBackwardOutput:
        """One ``forward`` / ``forward_backward`` call, run in passes of at most ``_PASS_TOKENS`` row tokens.

        Everything is validated before the first pass (``stable_reinforce`` datums against the session's
        sampling records in ``sequences``), and a non-finite loss in any pass restores the gradients the
        call found, so a failed call never leaves part of a gradient behind.
        """
        loss_fn = parse_loss_fn(loss_name)
        resolved = resolve_config(loss_fn, config)
        checked = check_data(data, loss_fn, self.vocab_size)
        if LOSS_SPECS[loss_fn].needs_provenance:
            checked = checked.with_inputs(provenance_inputs(data, checked.inputs_D, sequences))
        passes = training_passes(checked.tokens_D, _PASS_TOKENS)
        restore = self._grad_restorer() if backward and len(passes) > 1 else None
        outputs: list[dict[str, types.TensorData]] = [{} for _ in data]
        loss_sum = 0.0
        for members in passes:
            batch = lay_out(checked.subset(members), self._pad_id()).to(self.lm.device)
            recompute = backward and batch.input_ids_RW.numel() > _RECOMPUTE_TOKENS
            with torch.set_grad_enabled(backward), recomputed_layers(self.lm, recompute):
                logprobs_N = self._target_logprobs(batch)
                loss_N = elementwise_loss(loss_fn, logprobs_N, batch.loss_inputs_N, resolved, batch.lengths_D)
                total = loss_N.sum()
                try:
                    self._check_loss(total, loss_fn.value)
                except NonFiniteError:
                    if restore is not None:
                        restore()
                    raise
                if backward:
                    total.backward()
            loss_sum += float(total.detach())
            pieces = zip(
                logprobs_N.detach().split(batch.lengths_D),
                loss_N.detach().split(batch.lengths_D),
                strict=True,
            )
            for index, (logprobs_T, loss_T) in zip(members, pieces, strict=True):
                outputs[index] = {
                    "logprobs": types.TensorData.from_torch(logprobs_T.cpu()),
                    "elementwise_loss": types.TensorData.from_torch(loss_T.cpu()),
                }
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": loss_sum}
        )

    def _grad_restorer(self) -> Callable[[], None]:
        """A function that puts the trainable parameters' gradients back as they are now."""
        saved = [None if p.grad is None else p.grad.detach().clone() for p in self.params]

        def restore() -> None:
            for param, grad in zip(self.params, saved, strict=True):
                param.grad = grad

        return restore

    def run_custom_loss(self, data: list[types.Datum], loss: CustomLoss) -> types.ForwardBackwardOutput:
        """The SDK's client-side custom loss, in process: ``loss(data, logprobs_D)``, then its backward.

        The SDK runs a forward pass, differentiates ``loss`` on the client and sends the gradient back
        as cross-entropy weights; here the logprobs keep their autograd graph, so ``loss.backward()``
        reaches the weights directly (the same gradient, one pass fewer).
        """
        targets_only = [_targets_only(i, d) for i, d in enumerate(data)]
        batch = build_batch(targets_only, LossFn.CROSS_ENTROPY, self.vocab_size, self._pad_id()).to(
            self.lm.device
        )
        logprobs_N = self._target_logprobs(batch)
        # On the CPU (differentiably), as the SDK hands them to a custom loss, so it may mix in CPU tensors.
        logprobs_D = list(logprobs_N.cpu().split(batch.lengths_D))
        total, metrics = loss(data, logprobs_D)
        if not isinstance(total, torch.Tensor) or total.numel() != 1:
            raise LossInputError(f"a custom loss must return a scalar tensor, got {type(total).__name__}")
        self._check_loss(total, "custom")
        total.backward()
        out_metrics = {str(k): float(v) for k, v in metrics.items()}
        out_metrics["loss:sum"] = float(total.detach())
        outputs = [{"logprobs": types.TensorData.from_torch(lp.detach())} for lp in logprobs_D]
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics=out_metrics
        )

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    @staticmethod
    def _check_loss(total: torch.Tensor, name: str) -> None:
        if not bool(torch.isfinite(total)):
            raise NonFiniteError(
                f"{name} loss is {float(total)}: check the advantages / sampler logprobs for NaN or "
                "extreme values; no gradient was accumulated"
            )

    def _target_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """log p(target) at every datum position (chunked, checkpointed unembedding: ``target_logprobs``)."""
        return target_logprobs(self.lm, batch)

    # ------------------------------------------------------------------------------------------
    # Optimizer
    # ------------------------------------------------------------------------------------------

    def optim_step(self, params: types.AdamParams) -> types.OptimStepResponse:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            raise RuntimeError("optim_step without gradients: call forward_backward first")
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(
                f"gradient norm is {float(norm)}; the step was skipped and gradients cleared"
            )
        if params.grad_clip_norm > 0.0:
            torch.nn.utils.clip_grad_norm_(self.params, params.grad_clip_norm)
        for group in self.optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        bad = self.first_non_finite_weight()
        if bad is not None:
            raise NonFiniteError(
                f"step {self.step} made weight {bad} NaN/inf (learning rate or weight decay too large?); "
                "this client cannot be saved any more: resume from a checkpoint"
            )
        return types.OptimStepResponse(metrics={"grad_norm:mean": float(norm), "step:max": float(self.step)})

    def first_non_finite_weight(self) -> str | None:
        for name, param in zip(self.param_names, self.params, strict=True):
            if not bool(torch.isfinite(param).all()):
                return name
        return None

    # ------------------------------------------------------------------------------------------
    # Checkpoints
    # ------------------------------------------------------------------------------------------

    def save(
        self,
        dest: Path,
        kind: ckpt.CheckpointKind,
        user_metadata: dict[str, str],
        ttl_seconds: int | None,
    ) -> Path:
        bad = self.first_non_finite_weight()
        if bad is not None:
            raise NonFiniteError(f"weight {bad} holds NaN/inf; refusing to write {str(dest)!r}")

        def payload(directory: Path) -> None:
            if self.peft is not None:
                ckpt.save_adapter(directory, adapter_state(self.peft))
            else:
                ckpt.save_full_model(directory, self.lm)
            if kind is ckpt.CheckpointKind.STATE:
                ckpt.save_optimizer(
                    directory,
                    {
                        "optimizer": self.optimizer.state_dict(),
                        "param_names": self.param_names,
                        "step": self.step,
                    },
                )

        expires = None if ttl_seconds is None else datetime.now(UTC) + timedelta(seconds=ttl_seconds)
        meta = ckpt.CheckpointMeta(
            kind, self.run.base_model, self.run.lora, self.step, dict(user_metadata), expires
        )
        return ckpt.write_checkpoint(dest, meta, payload)

    def sampling_snapshot(self, path: str | None) -> ckpt.SamplingModel:
        """The current weights as a separate model for sampling (LoRA merged into fresh tensors)."""
        if self.peft is None:
            return ckpt.SamplingModel(snapshot_full(self.lm), self.tokenizer, self.run.base_model, path)
        # The merged model holds the training model's frozen base tensors wherever no adapter changed them.
        shared = frozenset(id(p) for p in self.peft.parameters())
        merged, lora = merge_lora(self.peft), lora_factors(self.peft)
        return ckpt.SamplingModel(merged, self.tokenizer, self.run.base_model, path, shared, lora)

    def load(self, path: Path, with_optimizer: bool) -> None:
        meta = ckpt.read_meta(path, expect=ckpt.CheckpointKind.STATE)
        if meta.base_model != self.run.base_model or meta.lora != _same_shape(meta.lora, self.run.lora):
            raise ckpt.CheckpointError(
                f"checkpoint {str(path)!r} is for {meta.base_model} (lora={meta.lora}); this client trains "
                f"{self.run.base_model} (lora={self.run.lora})"
            )
        loaded = ckpt.load_trainable_weights(path, meta)
        optimizer_state = ckpt.load_optimizer(path) if with_optimizer else None
        if optimizer_state is not None and optimizer_state.get("param_names") != self.param_names:
            raise ckpt.CheckpointError(f"checkpoint {str(path)!r}: optimizer state does not match the model")
        source = dict(loaded.named_parameters())
        with torch.no_grad():
            for name, param in zip(self.param_names, self.params, strict=True):
                param.copy_(source[name])
        self.optimizer.zero_grad(set_to_none=True)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state["optimizer"])
            self.step = int(optimizer_state["step"])
        else:
            self.optimizer.state.clear()
            self.step = 0


def _targets_only(index: int, datum: types.Datum) -> types.Datum:
    targets = datum.loss_fn_inputs.get("target_tokens")
    if targets is None:
        raise LossInputError(f"datum {index}: a custom loss needs loss_fn_inputs['target_tokens']")
    if targets.shape is not None and len(targets.shape) != 1:
        raise NotImplementedError(
            "forward_backward_custom: the local backend takes 1-D target_tokens only "
            f"(datum {index} has shape {targets.shape})"
        )
    return types.Datum(model_input=datum.model_input, loss_fn_inputs={"target_tokens": targets})


def _same_shape(saved: LoraSpec | None, current: LoraSpec | None) -> LoraSpec | None:
    """``current`` with the saved seed, so a checkpoint matches when only the init seed differs."""
    if saved is None or current is None:
        return current
    return LoraSpec(
        current.rank, saved.seed, current.train_mlp, current.train_attn, current.train_unembed, current.alpha
    )


def check_adam(params: types.AdamParams) -> None:
    """Refuse hyperparameters AdamW cannot take (NaN, negative, beta >= 1)."""
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


@contextlib.contextmanager
def recomputed_layers(model: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """While inside, the model's transformer layers run under activation checkpointing (non-reentrant):
    a forward pass keeps only each layer's inputs, and backward recomputes the layer.

    It uses transformers' own per-layer switch (``GradientCheckpointingLayer``), flipping only the layer
    objects' flags, so dropout and every other submodule keep their mode. Gradients are unchanged.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)] if enabled else []
    saved = [(layer.gradient_checkpointing, layer.training) for layer in layers]
    run = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
    try:
        for layer in layers:
            layer._gradient_checkpointing_func = run  # type: ignore[assignment]  # a plain attribute HF reads
            layer.gradient_checkpointing = True
            layer.training = True  # the flag HF checks; set on the layer object only, not its children
        yield
    finally:
        for layer, (checkpointing, training) in zip(layers, saved, strict=True):
            layer.gradient_checkpointing = checkpointing
            layer.training = training
