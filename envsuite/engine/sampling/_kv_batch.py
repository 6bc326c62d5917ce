"""The running batch of the sampling engine: rows of different lengths sharing one left-padded KV cache.

Layout: every row's tokens are right-aligned in a ``(B, L)`` attention mask (zeros on the left are
padding), the KV cache holds ``L`` positions per row, and each row has its own position ids (the count
of its real tokens), so padding changes neither attention nor rotary positions.

Rows come and go without copying the others (the cache layers keep spare rows and columns, see
``_kv_cache_layer``): joining rows are written into spare rows, right-aligned with the batch; a
leaving row's place is taken by one of the last rows (so :meth:`KVBatch.select` says which order the
kept rows end up in); columns that are padding in every row are dropped from the left by moving a
view's start.

Each row's next input token is pending (sampled, not yet in the cache); one :meth:`KVBatch.step` feeds
all pending tokens at once and returns the next-token logits of every row. A row that joined holding
only its prompt's cached prefix feeds the rest of its prompt (its tail) in that same step, into the
columns its prefix left free (:func:`batch_from_prefixes`), and samples from the step's logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import torch
from transformers import DynamicCache, PreTrainedModel

from envsuite.engine._token_tree import TreeLayout, tree_layout
from envsuite.engine.sampling._kv_cache_layer import GrowableLayer, new_cache
from envsuite.engine.sampling._llama_decode import AppendingLayer, TailTokens
from envsuite.engine.sampling._prefix_cache import PrefixMatch

SPARSE_FACTOR = 2
"""A running batch's buffers are compacted when they are more than this many times the size compacting
would give them (the live rows, and the live columns plus the usual room)..."""
COMPACT_MIN_BYTES = 32 << 20
"""...and more than this many bytes (smaller buffers are not worth a copy)."""


def kv_bytes_per_position(model: PreTrainedModel) -> int | None:
    """KV-cache bytes one token position takes in one row (keys and values of every layer), from the
    model's config; None when the config does not say (the engine then applies no KV budget)."""
    config = model.config.get_text_config()
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if not (isinstance(layers, int) and isinstance(heads, int) and isinstance(hidden, int)):
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    return int(layers * 2 * kv_heads * head_dim * model.dtype.itemsize)


class StepDecoder(Protocol):
    """What :meth:`KVBatch.step` feeds a step through: ``LlamaDecoder`` or a multi-adapter ``MixedDecoder``."""

    def step(
        self,
        input_ids_B: torch.Tensor,
        position_ids_B: torch.Tensor,
        mask_B_L: torch.Tensor,
        cache_layers: Sequence[AppendingLayer],
        tails: Sequence[TailTokens] = (),
    ) -> torch.Tensor: ...


@dataclass
class PrefillOutput:
    """A prefilled group of prompts (one row per prompt) and their next-token logits."""

    batch: KVBatch
    last_logits_B_V: torch.Tensor
    prompt_logprobs_B: list[list[float | None]] | None
    """Per prompt: ``None`` for the first token, then the logprob of each prompt token given the ones
    before it; only when requested."""


class KVBatch:
    """Rows sharing one left-padded KV cache (see module docstring)."""

    def __init__(self, cache: DynamicCache, mask_B_L: torch.Tensor, next_pos_B: torch.Tensor) -> None:
        self.cache = cache
        self.mask_B_L = mask_B_L
        self.next_pos_B = next_pos_B
        self.pending_B: list[int] = [0] * mask_B_L.shape[0]
        self.tail_B: list[tuple[int, ...]] = [()] * mask_B_L.shape[0]
        """Prompt tokens a row feeds before its pending token at the next step (a joined prompt's tail,
        whose columns its row left empty: :func:`batch_from_prefixes`); empty for every other row."""
        self.compact_min_bytes = COMPACT_MIN_BYTES
        """Buffers at most this large are never compacted (see :meth:`select`)."""

    @property
    def size(self) -> int:
        return int(self.mask_B_L.shape[0])

    @property
    def length(self) -> int:
        return int(self.mask_B_L.shape[1])

    @property
    def live_bytes(self) -> int:
        """KV bytes of the batch as laid out: every row holds as many positions as the longest row."""
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in _kv_layers(self.cache))

    @property
    def allocated_bytes(self) -> int:
        """KV bytes the batch's buffers take (live positions plus room for joins and appends)."""
        return sum(layer.allocated_bytes for layer in _kv_layers(self.cache))

    def step(self, model: PreTrainedModel, decoder: StepDecoder | None = None) -> torch.Tensor:
        """Feed every row's pending token; return the next-token logits ``(B, V)``.

        With a ``decoder`` (built for ``model``) the step bypasses ``model(...)``; the result is the same.
        """
        device = self.mask_B_L.device
        input_ids = torch.tensor(self.pending_B, dtype=torch.long, device=device)
        ones = torch.ones((self.size, 1), dtype=self.mask_B_L.dtype, device=device)
        mask = torch.cat([self.mask_B_L, ones], dim=1)
        tails = [
            TailTokens(row, tail, int(self.next_pos_B[row])) for row, tail in enumerate(self.tail_B) if tail
        ]
        if tails:
            if decoder is None:
                raise ValueError("feeding prompt tails in a decode step needs the lean decoder")
            for tail in tails:
                count = len(tail.token_ids)
                mask[tail.row, -1 - count : -1] = 1
            lengths = torch.tensor([len(tail) for tail in self.tail_B], dtype=torch.long, device=device)
            self.next_pos_B = self.next_pos_B + lengths
            self.tail_B = [()] * self.size
        if decoder is not None:
            logits = decoder.step(input_ids, self.next_pos_B, mask, _kv_layers(self.cache), tails)
        else:
            out = model(
                input_ids=input_ids[:, None],
                attention_mask=mask,
                position_ids=self.next_pos_B[:, None],
                past_key_values=self.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
        self.mask_B_L = mask
        self.next_pos_B = self.next_pos_B + 1
        return logits

    def take_rows(self, index: Sequence[int]) -> None:
        """Rebuild the batch from rows ``index`` (repeats allowed: samples sharing one prefilled prompt)."""
        if list(index) == list(range(self.size)):
            return
        rows = torch.tensor(list(index), dtype=torch.long, device=self.mask_B_L.device)
        self._index_rows(rows)
        self.pending_B = [self.pending_B[i] for i in index]
        self.tail_B = [self.tail_B[i] for i in index]

    def row_length(self, row: int) -> int:
        """Positions held for ``row`` (its prompt and every fed token)."""
        return int(self.mask_B_L[row].sum())

    def row_kv(self, row: int, start: int, end: int) -> torch.Tensor:
        """``(layers, 2, kv_heads, end - start, head_dim)``: the keys and values of ``row``'s positions
        ``[start, end)`` (counted over its real tokens, wherever padding sits)."""
        columns = self.mask_B_L[row].nonzero().squeeze(1)[start:end]
        return torch.stack(
            [
                torch.stack(
                    [layer.keys[row].index_select(1, columns), layer.values[row].index_select(1, columns)]
                )
                for layer in _kv_layers(self.cache)
            ]
        )

    def select(self, keep: Sequence[int]) -> list[int]:
        """Keep only rows ``keep`` (distinct); return them, as old indices, in their new order.

        Kept rows stay where they are, except the last ones, which move into the places of the rows
        that left (one row copy each, not a copy of the batch). Then columns that hold no real token
        in any kept row are dropped from the left, and buffers left over :data:`SPARSE_FACTOR` times
        larger than they need be are compacted (one copy of the kept KV).
        """
        count = len(keep)
        if count == self.size:
            return list(range(count))
        kept = set(keep)
        holes = [i for i in range(count) if i not in kept]
        movers = sorted(i for i in kept if i >= count)
        order = list(range(count))
        for hole, mover in zip(holes, movers, strict=True):
            order[hole] = mover
        for layer in _kv_layers(self.cache):
            layer.move_rows(holes, movers, count)
        index = torch.tensor(order, dtype=torch.long, device=self.mask_B_L.device)
        self.mask_B_L = self.mask_B_L.index_select(0, index)
        self.next_pos_B = self.next_pos_B.index_select(0, index)
        self.pending_B = [self.pending_B[i] for i in order]
        self.tail_B = [self.tail_B[i] for i in order]
        self._trim_left()
        self._compact_if_sparse()
        return order

    def extend(self, other: KVBatch) -> None:
        """Append ``other``'s rows after this batch's rows (only ``other``'s keys and values are copied)."""
        length = max(self.length, other.length)
        for mine, theirs in zip(_kv_layers(self.cache), _kv_layers(other.cache), strict=True):
            mine.join(theirs.keys, theirs.values)
        self.mask_B_L = torch.cat(
            [_pad_mask_left(self.mask_B_L, length), _pad_mask_left(other.mask_B_L, length)], dim=0
        )
        self.next_pos_B = torch.cat([self.next_pos_B, other.next_pos_B])
        self.pending_B = self.pending_B + other.pending_B
        self.tail_B = self.tail_B + other.tail_B

    def _index_rows(self, index: torch.Tensor) -> None:
        for layer in _kv_layers(self.cache):
            layer.select_rows(index)
        self.mask_B_L = self.mask_B_L.index_select(0, index)
        self.next_pos_B = self.next_pos_B.index_select(0, index)

    def _compact_if_sparse(self) -> None:
        # After the batch's longest or most crowded moment its buffers keep that size; once they are
        # over SPARSE_FACTOR times what compacting would leave (and large enough to matter), one copy
        # of the live KV gives the rest back.
        allocated = self.allocated_bytes
        if allocated <= self.compact_min_bytes or not self.length:
            return
        room = GrowableLayer.room(self.length)
        compacted = self.live_bytes * (self.length + room) // self.length
        if allocated > SPARSE_FACTOR * compacted:
            for layer in _kv_layers(self.cache):
                layer.compact()

    def _trim_left(self) -> None:
        used = self.mask_B_L.any(dim=0)
        if bool(used[0]) or not bool(used.any()):
            return
        start = int(used.long().argmax())
        for layer in _kv_layers(self.cache):
            layer.drop_left(start)
        self.mask_B_L = self.mask_B_L[:, start:].contiguous()


def prefill(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], want_prompt_logprobs: bool
) -> PrefillOutput:
    """Run the prompts through the model, filling a fresh KV cache with one left-padded row each.

    Prompts that share a long prefix (a system prompt) are first run as a token tree, each shared
    token once, and their KV rows are then gathered from it (see :func:`_tree_prefill`).
    """
    if not want_prompt_logprobs and len(prompts) > 1:
        layout = tree_layout(prompts, pad_id=0)
        if layout.shared:
            return _tree_prefill(model, prompts, layout)
    return _padded_prefill(model, prompts, want_prompt_logprobs)


def batch_from_prefixes(
    model: PreTrainedModel, matches: Sequence[PrefixMatch], tails: Sequence[Sequence[int]] | None = None
) -> KVBatch:
    """A batch holding exactly the cached KV of ``matches`` (one row each, left-padded), no forward pass.

    Row ``s`` holds ``matches[s].length`` positions and its next position is that length. With
    ``tails``, row ``s`` feeds ``tails[s]`` (at least one token) at its first step: its last token is
    pending, the others wait in ``tail_B``, and the row's prefix ends that many columns early (masked
    gap columns, which the step fills), so every row still ends at the batch's last column.
    """
    cached = [match.length for match in matches]
    gaps = [len(tail) - 1 for tail in tails] if tails is not None else [0] * len(matches)
    width = max(length + gap for length, gap in zip(cached, gaps, strict=True))
    first = matches[0].blocks[0]
    layers, _, kv_heads, _, head_dim = first.shape
    kv = first.new_zeros((layers, 2, len(matches), kv_heads, width, head_dim))
    mask = torch.zeros((len(matches), width), dtype=torch.long)
    for s, (match, gap) in enumerate(zip(matches, gaps, strict=True)):
        start = width - gap - match.length
        mask[s, start : width - gap] = 1
        for block in match.blocks:
            end = start + block.shape[3]
            kv[:, :, s, :, start:end] = block
            start = end
    cache = new_cache(model)
    for index, layer in enumerate(cache.layers):
        assert isinstance(layer, GrowableLayer)
        layer.assign(kv[index, 0], kv[index, 1])
    next_pos = torch.tensor(cached, dtype=torch.long, device=model.device)
    batch = KVBatch(cache, mask.to(model.device), next_pos)
    if tails is not None:
        batch.pending_B = [tail[-1] for tail in tails]
        batch.tail_B = [tuple(tail[:-1]) for tail in tails]
    return batch


def prefill_after_prefix(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], matches: Sequence[PrefixMatch]
) -> PrefillOutput:
    """Prefill only what follows each prompt's cached prefix (``matches``, from the prefix cache).

    The cached keys and values are left-padded into a fresh cache (:func:`batch_from_prefixes`), then
    the prompts' tails run as one left-padded batch on top of it, each token with its own position in
    its prompt. A row's real columns are its cached prefix, possibly a gap of padding (when its tail is
    shorter than the longest tail), then its tail: the mask covers the gap, so attention and positions
    are those of the whole prompt prefilled at once.
    """
    device = model.device
    cached = [match.length for match in matches]
    prefixes = batch_from_prefixes(model, matches)
    tails = [prompt[length:] for prompt, length in zip(prompts, cached, strict=True)]
    tail_width = max(len(tail) for tail in tails)
    input_ids = torch.zeros((len(prompts), tail_width), dtype=torch.long)
    tail_mask = torch.zeros((len(prompts), tail_width), dtype=torch.long)
    positions = torch.zeros((len(prompts), tail_width), dtype=torch.long)
    for s, (tail, length) in enumerate(zip(tails, cached, strict=True)):
        input_ids[s, tail_width - len(tail) :] = torch.tensor(list(tail), dtype=torch.long)
        tail_mask[s, tail_width - len(tail) :] = 1
        positions[s, tail_width - len(tail) :] = torch.arange(length, length + len(tail))
    full_mask = torch.cat([prefixes.mask_B_L, tail_mask.to(device)], dim=1)
    out = model(
        input_ids=input_ids.to(device),
        attention_mask=full_mask,
        position_ids=positions.to(device),
        past_key_values=prefixes.cache,
        use_cache=True,
        logits_to_keep=1,
    )
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    return PrefillOutput(
        batch=KVBatch(prefixes.cache, full_mask, next_pos),
        last_logits_B_V=out.logits[:, -1, :],
        prompt_logprobs_B=None,
    )


def _tree_prefill(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], layout: TreeLayout
) -> PrefillOutput:
    """Prefill a token-tree layout, then give each prompt its own KV row, gathered along its path.

    A token's key and value depend only on the tokens on its path (the tree mask) and on its position
    in its own prompt (rotary position ids), so the gathered rows equal a plain per-prompt prefill.
    """
    device = model.device
    assert layout.mask_RWW is not None
    # Logits only at columns that end some prompt (every row computes them for the same columns).
    last_cols = sorted({cols[-1] for cols in layout.columns_S})
    cache = new_cache(model)
    out = model(
        input_ids=layout.input_ids_RW.to(device),
        attention_mask=layout.mask_RWW[:, None, :, :].to(device),
        position_ids=layout.position_ids_RW.to(device),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=torch.tensor(last_cols, device=device),
    )
    slot = {col: i for i, col in enumerate(last_cols)}
    rows = torch.tensor(layout.row_S, device=device)
    picks = torch.tensor([slot[cols[-1]] for cols in layout.columns_S], device=device)
    last_logits = out.logits[rows, picks]
    length = max(len(p) for p in prompts)
    source = torch.zeros((len(prompts), length), dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for s, prompt in enumerate(prompts):
        source[s, length - len(prompt) :] = layout.flat_index(s)
        mask[s, length - len(prompt) :] = 1
    source, mask = source.to(device), mask.to(device)
    for layer in _kv_layers(cache):
        layer.assign(_gather_positions(layer.keys, source), _gather_positions(layer.values, source))
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    return PrefillOutput(
        batch=KVBatch(cache, mask, next_pos), last_logits_B_V=last_logits, prompt_logprobs_B=None
    )


def _gather_positions(tensor_R_H_W_D: torch.Tensor, source_B_L: torch.Tensor) -> torch.Tensor:
    """``(B, H, L, D)``: entry ``[b, :, l]`` is the flat ``row * W + column`` position ``source[b, l]``."""
    rows, heads, width, dim = tensor_R_H_W_D.shape
    flat = tensor_R_H_W_D.transpose(1, 2).reshape(rows * width, heads, dim)
    picked = flat.index_select(0, source_B_L.reshape(-1)).view(*source_B_L.shape, heads, dim)
    return picked.transpose(1, 2).contiguous()


def _padded_prefill(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], want_prompt_logprobs: bool
) -> PrefillOutput:
    """The prompts left-padded into one batch (attention mask and per-row position ids)."""
    device = model.device
    length = max(len(p) for p in prompts)
    input_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, length - len(prompt) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(dim=1) - 1).clamp_(min=0)
    cache = new_cache(model)
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=0 if want_prompt_logprobs else 1,
    )
    logits = out.logits
    prompt_logprobs = _prompt_logprobs(logits, input_ids, prompts) if want_prompt_logprobs else None
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    _kv_layers(cache)
    batch = KVBatch(cache, mask, next_pos)
    return PrefillOutput(batch=batch, last_logits_B_V=logits[:, -1, :], prompt_logprobs_B=prompt_logprobs)


def _prompt_logprobs(
    logits_B_L_V: torch.Tensor, input_ids_B_L: torch.Tensor, prompts: Sequence[Sequence[int]]
) -> list[list[float | None]]:
    length = input_ids_B_L.shape[1]
    result: list[list[float | None]] = []
    for row, prompt in enumerate(prompts):
        start = length - len(prompt)
        logits = logits_B_L_V[row, start : length - 1].float()
        targets = input_ids_B_L[row, start + 1 :]
        picked = logits.gather(1, targets[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
        scored: list[float | None] = [None]
        scored.extend(float(x) for x in picked.tolist())
        result.append(scored)
    return result


def _kv_layers(cache: DynamicCache) -> list[_FullLayer]:
    layers = []
    for layer in cache.layers:
        # Sliding-window and linear-attention layers keep positions differently; left-padding and
        # merging rows is only valid for plain full-attention layers.
        if type(layer) is not GrowableLayer or not layer.holds_cache:
            raise TypeError(
                f"the local sampling engine supports full-attention KV caches only, got {type(layer).__name__}"
            )
        layers.append(cast(_FullLayer, layer))
    return layers


class _FullLayer(Protocol):
    """A :class:`GrowableLayer` that holds data (its ``keys``/``values`` are set)."""

    keys: torch.Tensor
    values: torch.Tensor

    @property
    def allocated_bytes(self) -> int: ...

    def compact(self) -> None: ...

    def select_rows(self, index: torch.Tensor) -> None: ...

    def move_rows(self, target: list[int], source: list[int], rows: int) -> None: ...

    def drop_left(self, columns: int) -> None: ...

    def join(self, keys: torch.Tensor, values: torch.Tensor) -> None: ...

    def assign(self, keys: torch.Tensor, values: torch.Tensor) -> None: ...

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def _pad_mask_left(mask_B_L: torch.Tensor, length: int) -> torch.Tensor:
    missing = length - mask_B_L.shape[1]
    if missing == 0:
        return mask_B_L
    return torch.nn.functional.pad(mask_B_L, (missing, 0))
