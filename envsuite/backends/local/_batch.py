"""Turn a list of ``tinker.Datum`` into padded model inputs and flat per-token loss inputs (validated)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tinker import types

from envsuite.backends.local._losses import LOSS_SPECS, LossFn, LossInputError


@dataclass(frozen=True)
class TokenBatch:
    """A batch of datums, right-padded; ``_N`` tensors hold only the real positions, datum after datum."""

    input_ids_DT: torch.Tensor
    attention_mask_DT: torch.Tensor
    lengths_D: list[int]
    targets_N: torch.Tensor
    loss_inputs_N: dict[str, torch.Tensor]
    """Float loss inputs (weights, logprobs, advantages) by key."""

    @property
    def num_tokens(self) -> int:
        return int(self.targets_N.numel())


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


def build_batch(data: Sequence[types.Datum], loss_fn: LossFn, vocab_size: int, pad_id: int) -> TokenBatch:
    """Validate ``data`` against ``loss_fn`` and pack it; bad input raises :class:`LossInputError`."""
    if not data:
        raise LossInputError("the batch is empty: pass at least one Datum")
    tokens_D = [_datum_tokens(i, datum) for i, datum in enumerate(data)]
    inputs_D = [
        _datum_inputs(i, datum, loss_fn, len(tokens))
        for i, (datum, tokens) in enumerate(zip(data, tokens_D, strict=True))
    ]
    for i, (tokens, inputs) in enumerate(zip(tokens_D, inputs_D, strict=True)):
        ids = torch.tensor(tokens)
        for name, values in (("model_input", ids), ("target_tokens", inputs["target_tokens"])):
            if bool(((values < 0) | (values >= vocab_size)).any()):
                raise LossInputError(f"datum {i}: {name} has token ids outside [0, {vocab_size})")
    lengths_D = [len(tokens) for tokens in tokens_D]
    width = max(lengths_D)
    input_ids_DT = torch.full((len(data), width), pad_id, dtype=torch.long)
    attention_mask_DT = torch.zeros((len(data), width), dtype=torch.long)
    for row, tokens in enumerate(tokens_D):
        input_ids_DT[row, : len(tokens)] = torch.tensor(tokens)
        attention_mask_DT[row, : len(tokens)] = 1
    float_keys = sorted(set(inputs_D[0]) - {"target_tokens"})
    for i, inputs in enumerate(inputs_D):
        if sorted(set(inputs) - {"target_tokens"}) != float_keys:
            raise LossInputError(f"datum {i}: every datum in a batch needs the same loss_fn_inputs keys")
    return TokenBatch(
        input_ids_DT=input_ids_DT,
        attention_mask_DT=attention_mask_DT,
        lengths_D=lengths_D,
        targets_N=torch.cat([inputs["target_tokens"].long() for inputs in inputs_D]),
        loss_inputs_N={key: torch.cat([inputs[key].float() for inputs in inputs_D]) for key in float_keys},
    )
