"""Turn a list of ``tinker.Datum`` into model inputs and flat per-token loss inputs (validated).

Datums that start with the same tokens share them. A GRPO batch is the common case: every datum starts
with the same system prompt, the members of a group continue with the same problem, then each has its
own reply. Training them as separate rows would run each shared token through the model once per
datum; instead they are laid out as a token tree (``_token_tree``), each shared token once. Gradients
are unchanged: a shared token's hidden state receives the sum of what each datum's loss sends it,
which is what separate rows would add up in the shared weights.

Invariants of :class:`TokenBatch`:

* ``hidden_index_N`` lists, datum after datum in the caller's order, the flat ``row * width + column``
  index of the hidden state that predicts each of the datum's targets (shared columns repeat);
* every ``_N`` tensor has ``sum(lengths_D)`` entries in that same order;
* when no row holds more than one datum, ``attention_mask`` is the usual 2-D right-padding mask and
  ``position_ids_RW`` is None, so unshared batches take the model's usual (fastest) path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tinker import types

from envsuite.core import tokens_outside_vocabulary
from envsuite.engine._token_tree import plan_rows, tree_layout
from envsuite.engine.training._losses import (
    LOSS_SPECS,
    RATIO_MASK,
    LossFn,
    LossInputError,
    check_ratio_masks,
    default_ratio_mask,
)


@dataclass(frozen=True)
class TokenBatch:
    """A batch of datums as ``R`` rows of width ``W`` (see the module docstring for the invariants)."""

    input_ids_RW: torch.Tensor
    position_ids_RW: torch.Tensor | None
    """Each token's position in its datum; None when no row is shared (the model's own ``0..len-1``)."""
    attention_mask: torch.Tensor
    """``(R, W)`` 0/1 padding mask, or ``(R, 1, W, W)`` boolean (True = may attend) when rows are shared."""
    hidden_index_N: torch.Tensor
    lengths_D: list[int]
    targets_N: torch.Tensor
    loss_inputs_N: dict[str, torch.Tensor]
    """Float loss inputs (weights, logprobs, advantages) by key."""

    @property
    def num_tokens(self) -> int:
        return int(self.targets_N.numel())

    def to(self, device: torch.device) -> TokenBatch:
        """The same batch with every tensor on ``device`` (itself when already there)."""
        if self.input_ids_RW.device == device:
            return self
        return TokenBatch(
            input_ids_RW=self.input_ids_RW.to(device),
            position_ids_RW=None if self.position_ids_RW is None else self.position_ids_RW.to(device),
            attention_mask=self.attention_mask.to(device),
            hidden_index_N=self.hidden_index_N.to(device),
            lengths_D=self.lengths_D,
            targets_N=self.targets_N.to(device),
            loss_inputs_N={k: v.to(device) for k, v in self.loss_inputs_N.items()},
        )


def _datum_tokens(index: int, datum: types.Datum) -> list[int]:
    try:
        tokens = datum.model_input.to_ints()
    except (ValueError, TypeError, AttributeError) as exc:
        raise LossInputError(f"datum {index}: model_input must hold only token chunks ({exc})") from None
    if not tokens:
        raise LossInputError(f"datum {index}: model_input is empty")
    return tokens


def _datum_inputs(index: int, datum: types.Datum, loss_fn: LossFn, length: int) -> dict[str, torch.Tensor]:
    spec = LOSS_SPECS[loss_fn]
    given = set(datum.loss_fn_inputs)
    missing = [key for key in spec.required_inputs if key not in given]
    if missing:
        raise LossInputError(f"datum {index}: loss {loss_fn.value!r} needs loss_fn_inputs {missing}")
    unknown = sorted(given - set(spec.required_inputs) - set(spec.optional_inputs))
    if unknown:
        accepted = list(spec.required_inputs + spec.optional_inputs)
        raise LossInputError(
            f"datum {index}: loss {loss_fn.value!r} does not use {unknown} (accepts {accepted})"
        )
    tensors: dict[str, torch.Tensor] = {}
    for key in sorted(given):
        array = datum.loss_fn_inputs[key].to_numpy()
        if array.ndim != 1 or array.shape[0] != length:
            raise LossInputError(
                f"datum {index}: loss_fn_inputs[{key!r}] has shape {list(array.shape)}, "
                f"expected [{length}] (one value per model_input token)"
            )
        tensors[key] = torch.from_numpy(array.copy())
    return tensors


@dataclass(frozen=True)
class CheckedData:
    """Datums validated against a loss: their tokens and loss inputs as tensors, in the caller's order."""

    tokens_D: list[list[int]]
    inputs_D: list[dict[str, torch.Tensor]]

    def subset(self, members: Sequence[int]) -> CheckedData:
        return CheckedData([self.tokens_D[i] for i in members], [self.inputs_D[i] for i in members])

    def with_inputs(self, extra_D: Sequence[dict[str, torch.Tensor]]) -> CheckedData:
        """The same datums with more loss inputs each (the ones a backend derives, e.g. from records)."""
        merged = [{**inputs, **extra} for inputs, extra in zip(self.inputs_D, extra_D, strict=True)]
        return CheckedData(self.tokens_D, merged)


def check_data(data: Sequence[types.Datum], loss_fn: LossFn, vocab_size: int) -> CheckedData:
    """Validate every datum against ``loss_fn`` (bad input raises :class:`LossInputError`)."""
    if not data:
        raise LossInputError("the batch is empty: pass at least one Datum")
    tokens_D = [_datum_tokens(i, datum) for i, datum in enumerate(data)]
    inputs_D = [
        _datum_inputs(i, datum, loss_fn, len(tokens))
        for i, (datum, tokens) in enumerate(zip(data, tokens_D, strict=True))
    ]
    for i, (tokens, inputs) in enumerate(zip(tokens_D, inputs_D, strict=True)):
        # Checked as Python ints: an id too large for int64 must be named, not overflow a tensor.
        targets = [int(t) for t in inputs["target_tokens"].tolist()]
        for name, values in (("model_input", tokens), ("target_tokens", targets)):
            outside = tokens_outside_vocabulary(values, vocab_size)
            if outside is not None:
                raise LossInputError(f"datum {i}: {name}: {outside}")
    if loss_fn is LossFn.GSPO:
        check_ratio_masks([inputs.get(RATIO_MASK) for inputs in inputs_D])
        for inputs in inputs_D:  # cookbook's rl.train sends no mask: derive it as its rl_loop marks it
            inputs.setdefault(RATIO_MASK, default_ratio_mask(inputs["advantages"]))
    float_keys = sorted(set(inputs_D[0]) - {"target_tokens"})
    for i, inputs in enumerate(inputs_D):
        if sorted(set(inputs) - {"target_tokens"}) != float_keys:
            raise LossInputError(f"datum {i}: every datum in a batch needs the same loss_fn_inputs keys")
    return CheckedData(tokens_D, inputs_D)


def training_passes(tokens_D: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
    """Datum indices grouped into passes of whole token-tree rows, each pass at most ``max_tokens`` wide.

    A row wider than ``max_tokens`` (one long datum) is a pass of its own. Activation memory grows with
    the tokens of one forward pass, so a batch of long multi-turn datums is trained pass by pass;
    gradients add up across passes exactly as within one.
    """
    passes: list[list[int]] = []
    used = 0
    for row in plan_rows(tokens_D):
        members = row.members
        width = sum(len(tokens_D[m]) - shared for m, shared in zip(members, row.shared, strict=True))
        if passes and used + width <= max_tokens:
            passes[-1].extend(members)
            used += width
        else:
            passes.append(list(members))
            used = width
    return passes


def lay_out(checked: CheckedData, pad_id: int) -> TokenBatch:
    """The validated datums as token-tree rows (see the module docstring for the invariants)."""
    tokens_D, inputs_D = checked.tokens_D, checked.inputs_D
    float_keys = sorted(set(inputs_D[0]) - {"target_tokens"})
    layout = tree_layout(tokens_D, pad_id)
    hidden_index_N = torch.cat([layout.flat_index(d) for d in range(len(tokens_D))])
    positions: torch.Tensor | None = layout.position_ids_RW
    if layout.mask_RWW is not None:
        attention_mask = layout.mask_RWW[:, None, :, :]
    else:
        used = torch.tensor(layout.used_R)
        attention_mask = (torch.arange(layout.width)[None, :] < used[:, None]).long()
        positions = None
    return TokenBatch(
        input_ids_RW=layout.input_ids_RW,
        position_ids_RW=positions,
        attention_mask=attention_mask,
        hidden_index_N=hidden_index_N,
        lengths_D=[len(tokens) for tokens in tokens_D],
        targets_N=torch.cat([inputs["target_tokens"].long() for inputs in inputs_D]),
        loss_inputs_N={key: torch.cat([inputs[key].float() for inputs in inputs_D]) for key in float_keys},
    )


def build_batch(data: Sequence[types.Datum], loss_fn: LossFn, vocab_size: int, pad_id: int) -> TokenBatch:
    """Validate ``data`` against ``loss_fn`` and lay it out; bad input raises :class:`LossInputError`."""
    return lay_out(check_data(data, loss_fn, vocab_size), pad_id)
