"""The built-in losses of the Tinker interface, as pure functions over per-token tensors.

Layout (as Tinker's): a ``Datum``'s ``model_input`` holds the input tokens ``x_0..x_{T-1}``; every
tensor in ``loss_fn_inputs`` has the same length ``T`` and position ``t`` is about the token the model
predicts after reading ``x_0..x_t``:

* ``target_tokens[t]``: the next token (so usually ``x_{t+1}``),
* ``weights[t]``: cross-entropy weight (0 on prompt tokens),
* ``logprobs[t]``: the *sampler's* log-probability of ``target_tokens[t]`` (RL losses),
* ``advantages[t]``: the advantage of that token (RL losses),
* ``sequence_ratio_mask[t]``: nonzero where the token counts towards GSPO's sequence ratio (optional:
  without it the tokens with a nonzero advantage count, :func:`default_ratio_mask`).

Each loss returns the per-token loss ``elementwise_T``; the datum's loss is its sum and the batch's
loss (metric ``loss:sum``) is the sum over datums. Nothing is averaged, exactly as in Tinker, so the
caller decides the normalization through ``weights`` / ``advantages``. With ``logp`` the trained
model's log-probability of ``target_tokens``, ``q`` the sampler's, ``ratio = exp(logp - q)`` and
``sg`` a stop-gradient:

* ``cross_entropy``: ``-weights * logp`` (``weights`` default to 1),
* ``importance_sampling``: ``-ratio * A`` (REINFORCE with an off-policy correction),
* ``ppo``: ``-min(ratio * A, clip(ratio, low, high) * A)``,
* ``cispo``: ``-sg(clip(ratio, low, high)) * logp * A`` (the clipped ratio only weights the gradient),
* ``dro``: ``-(logp * A - beta / 2 * (logp - q)^2)``,
* ``gspo``: ``ppo`` with every token's ratio replaced by its datum's sequence ratio
  ``exp(mean over the masked tokens of (logp - q))`` in value, keeping its own gradient (GSPO-token),
* ``stable_reinforce``: ``-w * A * logp`` with ``w = 1`` where ``A >= 0`` and
  ``w = sg(min(1, pi(s) / mu(s)))`` where ``A < 0``, ``pi(s) / mu(s)`` the whole sampled sequence's
  probability ratio under the trained and the sampling policy (Tapered Off-Policy REINFORCE, Le Roux et
  al. 2025). Its sampler logprobs and sequences come from the records kept at sampling time, which the
  backend turns into the derived inputs ``sampler_logprobs`` and ``sequence_index`` (see
  :data:`DERIVED_INPUTS`); the caller never sends them.

``low``/``high`` are ``loss_fn_config``'s ``clip_low_threshold``/``clip_high_threshold`` (default 0.8 and
1.2, epsilon 0.2 on both sides) and ``beta`` its ``beta`` (default 0.05).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from envsuite.losses import LossFn


class LossInputError(ValueError):
    """A loss was asked for with missing, misshapen or unknown inputs or config."""


SAMPLER_LOGPROBS = "sampler_logprobs"
"""Derived input: the sampler's logprob of each target token, from the sampling records (0 elsewhere)."""
SEQUENCE_INDEX = "sequence_index"
"""Derived input: which sampled sequence of its datum each target token belongs to (0, 1, ...), or -1."""
DERIVED_INPUTS = (SAMPLER_LOGPROBS, SEQUENCE_INDEX)
"""Inputs the backend fills in from what it recorded at sampling time (``stable_reinforce``)."""
RATIO_MASK = "sequence_ratio_mask"
"""GSPO's optional input: the tokens its sequence ratio is taken over (:func:`default_ratio_mask`)."""

_CLIP_DEFAULTS: Mapping[str, float] = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


@dataclass(frozen=True)
class LossSpec:
    """What a loss reads: ``loss_fn_inputs`` keys (required, optional), ``loss_fn_config`` keys with their
    defaults, and whether datums need provenance (``Datum.with_provenance``) and sampling records."""

    required_inputs: tuple[str, ...]
    optional_inputs: tuple[str, ...]
    config_defaults: Mapping[str, float]
    needs_provenance: bool = False


_RL_INPUTS = ("target_tokens", "logprobs", "advantages")

LOSS_SPECS: dict[LossFn, LossSpec] = {
    LossFn.CROSS_ENTROPY: LossSpec(("target_tokens",), ("weights",), {}),
    LossFn.IMPORTANCE_SAMPLING: LossSpec(_RL_INPUTS, (), {}),
    LossFn.PPO: LossSpec(_RL_INPUTS, (), _CLIP_DEFAULTS),
    LossFn.CISPO: LossSpec(_RL_INPUTS, (), _CLIP_DEFAULTS),
    LossFn.DRO: LossSpec(_RL_INPUTS, (), {"beta": 0.05}),
    LossFn.GSPO: LossSpec(_RL_INPUTS, (RATIO_MASK,), _CLIP_DEFAULTS),
    # ``logprobs`` is accepted (tinker-cookbook sends it) and unused: the recorded sampler logprobs count.
    LossFn.STABLE_REINFORCE: LossSpec(("target_tokens", "advantages"), ("logprobs",), {}, True),
}


def parse_loss_fn(name: str) -> LossFn:
    """The :class:`LossFn` for a Tinker loss name, or a :class:`LossInputError` listing the supported ones."""
    try:
        return LossFn(name)
    except ValueError:
        supported = ", ".join(fn.value for fn in LossFn)
        hint = " ('custom' losses run through forward_backward_custom)" if name == "custom" else ""
        raise LossInputError(
            f"loss {name!r} is not implemented by the local backend{hint}; supported: {supported}"
        ) from None


def resolve_config(loss_fn: LossFn, config: Mapping[str, float | str] | None) -> dict[str, float]:
    """Fill a ``loss_fn_config`` with defaults; unknown keys, non-numbers and impossible values are errors."""
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
    if "clip_low_threshold" in resolved:
        low, high = resolved["clip_low_threshold"], resolved["clip_high_threshold"]
        if not 0.0 <= low <= 1.0 <= high:
            raise LossInputError(
                f"{loss_fn.value} needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low} and {high}"
            )
    if "beta" in resolved and not resolved["beta"] >= 0.0:
        raise LossInputError(f"dro needs beta >= 0, got {resolved['beta']}")
    return resolved


# -- the losses, token by token ------------------------------------------------------------------


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
    return _clipped_surrogate(ratio_T, advantages_T, clip_low_threshold, clip_high_threshold)


def cispo(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> torch.Tensor:
    """Per-token ``-sg(clip(ratio, low, high)) * logp * A``: every token keeps a gradient, weighted."""
    ratio_T = torch.exp(logprobs_T.detach() - sampler_logprobs_T)
    weight_T = torch.clamp(ratio_T, clip_low_threshold, clip_high_threshold)
    return -weight_T * logprobs_T * advantages_T


def dro(
    logprobs_T: torch.Tensor, sampler_logprobs_T: torch.Tensor, advantages_T: torch.Tensor, beta: float = 0.05
) -> torch.Tensor:
    """Per-token ``-(logp * A - beta / 2 * (logp - sampler_logp)^2)``."""
    return -(logprobs_T * advantages_T - 0.5 * beta * (logprobs_T - sampler_logprobs_T) ** 2)


def gspo(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    ratio_mask_T: torch.Tensor,
    lengths_D: Sequence[int] | None = None,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> torch.Tensor:
    """GSPO-token: each datum's sequence log-ratio is the mean of ``logp - q`` over its masked tokens;
    every token's ratio takes that value with its own ``logp``'s gradient, then PPO's clipped surrogate.

    ``lengths_D`` splits the flat tensors into datums (None: one datum). A sent mask that marks no token
    is refused before this is called (:func:`check_ratio_masks`); a derived one marks none only when
    every advantage is 0 (:func:`default_ratio_mask`), and that datum's ratio is taken as 1: its loss and
    gradient are 0 whatever the ratio.
    """
    datum_T = _datum_ids(lengths_D, logprobs_T)
    n_datums = int(datum_T.max()) + 1 if datum_T.numel() else 0
    in_ratio_T = (ratio_mask_T != 0).to(logprobs_T.dtype)
    log_ratio_T = (logprobs_T.detach() - sampler_logprobs_T) * in_ratio_T
    sums_D = log_ratio_T.new_zeros(n_datums).index_add(0, datum_T, log_ratio_T)
    counts_D = in_ratio_T.new_zeros(n_datums).index_add(0, datum_T, in_ratio_T).clamp(min=1.0)
    sequence_log_ratio_T = (sums_D / counts_D).index_select(0, datum_T)
    ratio_T = torch.exp(sequence_log_ratio_T + logprobs_T - logprobs_T.detach())
    return _clipped_surrogate(ratio_T, advantages_T, clip_low_threshold, clip_high_threshold)


def stable_reinforce(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    sequence_index_T: torch.Tensor,
    lengths_D: Sequence[int] | None = None,
) -> torch.Tensor:
    """Tapered Off-Policy REINFORCE (TOPR): per token ``-w * A * logp``.

    ``w = 1`` where ``A >= 0`` (no importance weight: nothing can blow up), and where ``A < 0``
    ``w = sg(min(1, exp(sum over the sequence's tokens of (logp - q))))``, the truncated probability ratio
    of the whole sampled sequence the token belongs to (``sequence_index_T``, per datum; -1 marks
    tokens no sequence sampled, which must carry ``A == 0``). Truncating at 1 only ever shrinks the push
    away from a sequence the trained policy already makes less likely than the sampler did.
    """
    sampled_T = sequence_index_T >= 0
    safe_T = _segments(sequence_index_T, lengths_D).clamp(min=0)
    log_ratio_T = torch.where(sampled_T, logprobs_T.detach() - sampler_logprobs_T, 0.0)
    sums_S = log_ratio_T.new_zeros(int(safe_T.max()) + 1).index_add(0, safe_T, log_ratio_T)
    truncated_T = torch.exp(torch.clamp(sums_S.index_select(0, safe_T), max=0.0))
    weight_T = torch.where(sampled_T & (advantages_T < 0), truncated_T, torch.ones_like(truncated_T))
    return -weight_T * advantages_T * logprobs_T


def _clipped_surrogate(
    ratio_T: torch.Tensor, advantages_T: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    clipped_T = torch.clamp(ratio_T, low, high)
    return -torch.minimum(ratio_T * advantages_T, clipped_T * advantages_T)


def _datum_ids(lengths_D: Sequence[int] | None, like_T: torch.Tensor) -> torch.Tensor:
    """Which datum each position of the flat tensors belongs to."""
    if lengths_D is None:
        return torch.zeros(like_T.shape[0], dtype=torch.long, device=like_T.device)
    counts = torch.tensor(list(lengths_D), dtype=torch.long, device=like_T.device)
    return torch.repeat_interleave(torch.arange(len(lengths_D), device=like_T.device), counts)


def _segments(sequence_index_T: torch.Tensor, lengths_D: Sequence[int] | None) -> torch.Tensor:
    """Per-datum sequence indices made unique across the batch (-1 stays -1)."""
    local_T = sequence_index_T.long()
    width = max(int(local_T.max()) + 1, 1)
    datum_T = _datum_ids(lengths_D, sequence_index_T)
    return torch.where(local_T >= 0, datum_T * width + local_T, -1)


def default_ratio_mask(advantages_T: torch.Tensor) -> torch.Tensor:
    """The ``sequence_ratio_mask`` of a GSPO datum sent without one: its tokens with a nonzero advantage.

    Tinker's GSPO page (tinker-docs.thinkingmachines.ai/tinker/losses/gspo) takes the ratio as the
    geometric mean over "a sequence's sampled tokens", the ones the mask marks; neither it nor the SDK
    (tinker 0.38 lists the key, ``types/datum.py:34``) says more about a datum without one, and the
    hosted service trains cookbook 0.6.1's ``rl.train`` datums, which never carry it. Those datums say
    which tokens were sampled only through their advantages: ``rl/train.py:274`` (``_remove_mask``)
    strips the training mask before ``forward_backward``, and ``rl/data_processing.py:245-257`` gives
    every mask-1 (sampled) token its trajectory's advantage and every prompt, observation or masked-turn
    token 0. ``recipes/rl_loop.py:269-274``, which does send the mask, marks ``[0] * prompt + [1] *
    sampled``: the same tokens, for every datum whose loss is not 0 whatever its ratio.
    """
    return (advantages_T != 0).to(advantages_T.dtype)


def check_ratio_masks(masks_D: Sequence[torch.Tensor | None]) -> None:
    """Refuse a GSPO datum whose sent ``sequence_ratio_mask`` marks no token (its sequence ratio is
    undefined); None is a datum that sent none (:func:`default_ratio_mask` marks its tokens)."""
    for index, mask_T in enumerate(masks_D):
        if mask_T is not None and not bool((mask_T != 0).any()):
            raise LossInputError(
                f"datum {index}: sequence_ratio_mask marks no token, so gspo has no sequence ratio for it "
                "(mark the sampled tokens)"
            )


def elementwise_loss(
    loss_fn: LossFn,
    logprobs_T: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float],
    lengths_D: Sequence[int] | None = None,
) -> torch.Tensor:
    """Dispatch to one loss; ``inputs`` hold float tensors aligned with ``logprobs_T``, datum after datum
    (``lengths_D``; None is one datum)."""
    if loss_fn is LossFn.CROSS_ENTROPY:
        weights_T = inputs.get("weights")
        return cross_entropy(logprobs_T, torch.ones_like(logprobs_T) if weights_T is None else weights_T)
    if loss_fn is LossFn.STABLE_REINFORCE:
        return stable_reinforce(
            logprobs_T, inputs[SAMPLER_LOGPROBS], inputs["advantages"], inputs[SEQUENCE_INDEX], lengths_D
        )
    sampler_T, advantages_T = inputs["logprobs"], inputs["advantages"]
    if loss_fn is LossFn.IMPORTANCE_SAMPLING:
        return importance_sampling(logprobs_T, sampler_T, advantages_T)
    if loss_fn is LossFn.DRO:
        return dro(logprobs_T, sampler_T, advantages_T, beta=config["beta"])
    low, high = config["clip_low_threshold"], config["clip_high_threshold"]
    if loss_fn is LossFn.GSPO:
        return gspo(logprobs_T, sampler_T, advantages_T, inputs[RATIO_MASK], lengths_D, low, high)
    if loss_fn is LossFn.CISPO:
        return cispo(logprobs_T, sampler_T, advantages_T, low, high)
    return ppo(logprobs_T, sampler_T, advantages_T, low, high)
