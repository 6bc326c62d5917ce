"""The built-in losses of the Tinker interface, as pure functions over per-token tensors.

Layout (as Tinker's): a ``Datum``'s ``model_input`` holds the input tokens ``x_0..x_{T-1}``; every
tensor in ``loss_fn_inputs`` has the same length ``T`` and position ``t`` is about the token the model
predicts after reading ``x_0..x_t``:

* ``target_tokens[t]``: the next token (so usually ``x_{t+1}``),
* ``weights[t]``: cross-entropy weight (0 on prompt tokens),
* ``logprobs[t]``: the *sampler's* log-probability of ``target_tokens[t]`` (RL losses),
* ``advantages[t]``: the advantage of that token (RL losses).

Each loss returns the per-token loss ``elementwise_T``; the datum's loss is its sum and the batch's
loss (metric ``loss:sum``) is the sum over datums. Nothing is averaged, exactly as in Tinker, so the
caller decides the normalization through ``weights`` / ``advantages``. With ``logp`` the trained
model's log-probability of ``target_tokens`` and ``ratio = exp(logp - logprobs)``:

* ``cross_entropy``: ``-weights * logp`` (``weights`` default to 1),
* ``importance_sampling``: ``-ratio * advantages`` (REINFORCE with an off-policy correction),
* ``ppo``: ``-min(ratio * A, clip(ratio, clip_low_threshold, clip_high_threshold) * A)``, thresholds
  from ``loss_fn_config`` (defaults 0.8 and 1.2, i.e. epsilon 0.2 on both sides).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import torch


class LossFn(StrEnum):
    """The losses the local backend implements (a subset of ``tinker.types.LossFnType``)."""

    CROSS_ENTROPY = "cross_entropy"
    """Supervised next-token loss weighted per token."""
    IMPORTANCE_SAMPLING = "importance_sampling"
    """Policy gradient with the ratio of trained to sampler probabilities."""
    PPO = "ppo"
    """Policy gradient with the ratio clipped to a trust region."""


class LossInputError(ValueError):
    """A loss was asked for with missing, misshapen or unknown inputs or config."""


@dataclass(frozen=True)
class LossSpec:
    """What a loss reads: required and optional ``loss_fn_inputs`` keys and ``loss_fn_config`` keys."""

    required_inputs: tuple[str, ...]
    optional_inputs: tuple[str, ...]
    config_defaults: Mapping[str, float]


LOSS_SPECS: dict[LossFn, LossSpec] = {
    LossFn.CROSS_ENTROPY: LossSpec(("target_tokens",), ("weights",), {}),
    LossFn.IMPORTANCE_SAMPLING: LossSpec(("target_tokens", "logprobs", "advantages"), (), {}),
    LossFn.PPO: LossSpec(
        ("target_tokens", "logprobs", "advantages"),
        (),
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ),
}


def parse_loss_fn(name: str) -> LossFn:
    """The :class:`LossFn` for a Tinker loss name, or a :class:`LossInputError` listing the supported ones."""
    try:
        return LossFn(name)
    except ValueError:
        supported = ", ".join(fn.value for fn in LossFn)
        raise LossInputError(
            f"loss {name!r} is not implemented by the local backend; supported: {supported}"
        ) from None


def resolve_config(loss_fn: LossFn, config: Mapping[str, float | str] | None) -> dict[str, float]:
    """Fill a ``loss_fn_config`` with defaults; unknown keys or non-numbers are errors."""
    defaults = LOSS_SPECS[loss_fn].config_defaults
    resolved = dict(defaults)
    for key, value in (config or {}).items():
        if key not in defaults:
            known = ", ".join(defaults) or "none"
            raise LossInputError(f"loss {loss_fn.value!r} has no config key {key!r} (known: {known})")
        try:
            resolved[key] = float(value)
        except ValueError:
            raise LossInputError(f"loss config {key}={value!r} is not a number") from None
    if loss_fn is LossFn.PPO and not resolved["clip_low_threshold"] <= 1.0 <= resolved["clip_high_threshold"]:
        raise LossInputError(
            "ppo needs clip_low_threshold <= 1 <= clip_high_threshold, got "
            f"{resolved['clip_low_threshold']} and {resolved['clip_high_threshold']}"
        )
    return resolved


def cross_entropy(logprobs_T: torch.Tensor, weights_T: torch.Tensor) -> torch.Tensor:
    """Per-token ``-weights * logp``."""
    return -weights_T * logprobs_T


def importance_sampling(
    logprobs_T: torch.Tensor, sampler_logprobs_T: torch.Tensor, advantages_T: torch.Tensor
) -> torch.Tensor:
    """Per-token ``-exp(logp - sampler_logp) * advantages``."""
    ratio_T = torch.exp(logprobs_T - sampler_logprobs_T)
    return -ratio_T * advantages_T


def ppo(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> torch.Tensor:
    """Per-token clipped surrogate ``-min(ratio * A, clip(ratio, low, high) * A)``."""
    ratio_T = torch.exp(logprobs_T - sampler_logprobs_T)
    clipped_T = torch.clamp(ratio_T, clip_low_threshold, clip_high_threshold)
    return -torch.minimum(ratio_T * advantages_T, clipped_T * advantages_T)


def elementwise_loss(
    loss_fn: LossFn,
    logprobs_T: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float],
) -> torch.Tensor:
    """Dispatch to one loss; ``inputs`` hold float tensors aligned with ``logprobs_T``."""
    if loss_fn is LossFn.CROSS_ENTROPY:
        weights_T = inputs.get("weights")
        return cross_entropy(logprobs_T, torch.ones_like(logprobs_T) if weights_T is None else weights_T)
    if loss_fn is LossFn.IMPORTANCE_SAMPLING:
        return importance_sampling(logprobs_T, inputs["logprobs"], inputs["advantages"])
    return ppo(
        logprobs_T,
        inputs["logprobs"],
        inputs["advantages"],
        clip_low_threshold=config["clip_low_threshold"],
        clip_high_threshold=config["clip_high_threshold"],
    )
