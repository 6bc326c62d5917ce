"""Turn a list of ``tinker.Datum`` into model inputs and flat per-token loss inputs (validated).

Datums that start with the same tokens share them. A GRPO batch is the common case: every datum starts
with the same system prompt, the members of a group continue with the same problem, then each has its
own reply. Training them as separate rows runs each shared token through the model once per datum.
Here datums are laid out as a *token tree* instead: a row holds every distinct token of a run of
datums once, in the order of the datums (sorted, so datums with long common prefixes are neighbours),
and a datum is a path through the row::

    row:        [ system + problem A | reply a1 | reply a2 | problem B | reply b1 | reply b2 ]
    datum a2:     ^^^^^^^^^^^^^^^^^^^^            ^^^^^^^^
    datum b1:     ^^^^^^ (system)                            ^^^^^^^^^^^^^^^^^^^^^

Each token attends exactly to the tokens on its own path up to itself (a 4-D attention mask) and
carries its position in its datum as position id, so every hidden state is the one the datum gets
alone (up to float rounding). Gradients are unchanged too: a shared token's hidden state receives the
sum of what each datum's loss sends it, which is what separate rows would add up in the shared weights.

Invariants of :class:`TokenBatch`:

* ``hidden_index_N`` lists, datum after datum in the caller's order, the flat ``row * width + column``
  index of the hidden state that predicts each of the datum's targets (shared columns repeat);
* every ``_N`` tensor has ``sum(lengths_D)`` entries in that same order;
* when no row holds more than one datum, ``attention_mask`` is the usual 2-D right-padding mask
  (and ``position_ids_RW`` the plain ``0..len-1``), so unshared batches run exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tinker import types

from envsuite.backends.local._losses import LOSS_SPECS, LossFn, LossInputError

MIN_SHARED_PREFIX = 16
"""A datum joins the previous datum's row only when they share at least this many leading tokens."""
PACKED_ROW_TOKENS = 1024
"""A shared row grows past the longest datum only up to this many tokens: attention over a row costs
its length squared, so long replies behind a short shared prompt are better left in their own rows."""


@dataclass(frozen=True)
class TokenBatch:
    """A batch of datums as ``R`` rows of width ``W`` (see the module docstring for the invariants)."""

    input_ids_RW: torch.Tensor
    position_ids_RW: torch.Tensor
    attention_mask: torch.Tensor
    """``(R, W)`` 0/1 padding mask, or ``(R, 1, W, W)`` boolean (True = may attend) when rows are packed."""
    hidden_index_N: torch.Tensor
    lengths_D: list[int]
    targets_N: torch.Tensor
    loss_inputs_N: dict[str, torch.Tensor]
    """Float loss inputs (weights, logprobs, advantages) by key."""

    @property
    def num_tokens(self) -> int:
        return int(self.targets_N.numel())

    @property
    def packed(self) -> bool:
        return self.attention_mask.dim() == 4


@dataclass(frozen=True)
class Pack:
    """Datums laid out as one row, in this order; each shares ``shared[k]`` leading tokens with the one before."""

    members: list[int]
    shared: list[int]


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


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_packs(tokens_D: Sequence[Sequence[int]], *, share_prefixes: bool = True) -> list[Pack]:
    """Group datums into rows (see the module docstring).

    In sorted order a datum's longest common prefix with any earlier datum is the one with its direct
    predecessor, so sharing with the predecessor alone finds every shared token.
    """
    if not share_prefixes:
        return [Pack([i], [0]) for i in range(len(tokens_D))]
    cap = max(max(len(t) for t in tokens_D), PACKED_ROW_TOKENS)
    packs: list[Pack] = []
    width = 0
    previous: Sequence[int] = ()
    for i in sorted(range(len(tokens_D)), key=lambda i: list(tokens_D[i])):
        own = tokens_D[i]
        shared = _common_prefix(previous, own)
        if packs and shared >= MIN_SHARED_PREFIX and width + len(own) - shared <= cap:
            packs[-1].members.append(i)
            packs[-1].shared.append(shared)
            width += len(own) - shared
        else:
            packs.append(Pack([i], [0]))
            width = len(own)
        previous = own
    return packs


@dataclass(frozen=True)
class _Layout:
    input_ids_RW: torch.Tensor
    position_ids_RW: torch.Tensor
    columns_D: list[list[int]]
    """Per datum, the column of each of its positions in its row (its path through the row)."""
    mask_RWW: torch.Tensor | None
    """Who may attend to whom; None when every row holds one datum (plain causal + padding)."""


def _layout(packs: list[Pack], tokens_D: Sequence[Sequence[int]], pad_id: int) -> _Layout:
    rows: list[tuple[list[int], list[int]]] = []
    columns_D: list[list[int]] = [[] for _ in tokens_D]
    for pack in packs:
        ids: list[int] = []
        pos: list[int] = []
        path: list[int] = []
        for member, shared in zip(pack.members, pack.shared, strict=True):
            own = tokens_D[member]
            path = path[:shared] + list(range(len(ids), len(ids) + len(own) - shared))
            ids += own[shared:]
            pos += range(shared, len(own))
            columns_D[member] = path
        rows.append((ids, pos))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (ids, pos) in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        positions[r, : len(pos)] = torch.tensor(pos)
    mask = None
    if any(len(pack.members) > 1 for pack in packs):
        mask = _path_mask(packs, columns_D, [len(ids) for ids, _ in rows], width)
    return _Layout(input_ids, positions, columns_D, mask)


def _path_mask(packs: list[Pack], columns_D: list[list[int]], used_R: list[int], width: int) -> torch.Tensor:
    """``(R, W, W)``: a token attends to the tokens on its datum's path up to itself."""
    mask = torch.zeros((len(packs), width, width), dtype=torch.bool)
    for r, pack in enumerate(packs):
        for member in pack.members:
            path = torch.tensor(columns_D[member], dtype=torch.long)
            causal = torch.ones((len(path), len(path)), dtype=torch.bool).tril()
            mask[r, path[:, None], path[None, :]] |= causal
        # A padding column attending nowhere would make NaNs (softmax over nothing); let it see itself.
        pad = torch.arange(used_R[r], width)
        mask[r, pad, pad] = True
    return mask


def build_batch(
    data: Sequence[types.Datum],
    loss_fn: LossFn,
    vocab_size: int,
    pad_id: int,
    *,
    share_prefixes: bool = True,
) -> TokenBatch:
    """Validate ``data`` against ``loss_fn`` and lay it out; bad input raises :class:`LossInputError`."""
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
    float_keys = sorted(set(inputs_D[0]) - {"target_tokens"})
    for i, inputs in enumerate(inputs_D):
        if sorted(set(inputs) - {"target_tokens"}) != float_keys:
            raise LossInputError(f"datum {i}: every datum in a batch needs the same loss_fn_inputs keys")
    packs = plan_packs(tokens_D, share_prefixes=share_prefixes)
    layout = _layout(packs, tokens_D, pad_id)
    width = layout.input_ids_RW.shape[1]
    row_of = {member: r for r, pack in enumerate(packs) for member in pack.members}
    hidden_index_N = torch.cat(
        [torch.tensor(cols, dtype=torch.long) + row_of[d] * width for d, cols in enumerate(layout.columns_D)]
    )
    if layout.mask_RWW is not None:
        attention_mask = layout.mask_RWW[:, None, :, :]
    else:
        used = torch.tensor([len(tokens_D[pack.members[0]]) for pack in packs])
        attention_mask = (torch.arange(width)[None, :] < used[:, None]).long()
    return TokenBatch(
        input_ids_RW=layout.input_ids_RW,
        position_ids_RW=layout.position_ids_RW,
        attention_mask=attention_mask,
        hidden_index_N=hidden_index_N,
        lengths_D=[len(tokens) for tokens in tokens_D],
        targets_N=torch.cat([inputs["target_tokens"].long() for inputs in inputs_D]),
        loss_inputs_N={key: torch.cat([inputs[key].float() for inputs in inputs_D]) for key in float_keys},
    )
