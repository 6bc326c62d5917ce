"""A lean one-token decode step for Llama-family models, numerically the same as transformers' forward.

The sampling engine decodes one token for every running row per step. Through ``model(...)`` each
step pays transformers' generic machinery: output-capture decorators, keyword plumbing through 30
layers, the attention-interface lookup, and a fresh 4D mask built from the 2D padding mask. At batch
32 on SmolLM2-135M that is a few hundred small operations per step around 211 matrix products.

:class:`LlamaDecoder` runs the same computation directly on the model's own modules and tensors, in
the same order and with the same kernels (the embedding, RMSNorm and rotary modules' arithmetic,
the same weights multiplied through oneDNN as the engine's model layers are
(``envsuite.engine.kernels``), SDPA with the query heads grouped per key/value head as transformers
does for one-token queries), so its logits equal those of ``model(...)`` up to float rounding
(tested). The mask is built once per step and shared by every layer. A step can also feed the prompt
tails of rows that joined with only a cached prefix (:class:`TailTokens`): their tokens are extra
rows of the same layer products, attending causally over their own row. Models it does not
cover (other architectures, sliding windows, biases it does not know) keep using ``model(...)``:
:func:`llama_decoder` returns None for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from envsuite.engine.kernels import (
    ROW_BUCKETS,
    FrozenLinear,
    FusedPart,
    OneDnnLinear,
    Product,
    ProductPath,
    bucket_index,
    native_kernels,
    onednn_available,
    onednn_fits,
    zero_filled_biases,
)
from envsuite.engine.sampling._captured_step import CapturedLayers
from envsuite.engine.sampling._rotary_table import VECTOR_CHUNK, RotaryTable, static_rotary

_SUPPORTED_MODEL_TYPES = frozenset({"llama"})


class AppendingLayer(Protocol):
    """A KV-cache layer: ``update`` appends new positions and returns all keys and values, as views of
    the cache's own memory (a step writes its rows' prompt tails through them)."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class TailTokens:
    """Prompt tokens a row feeds in a decode step before its pending token (a prompt's tail, joined
    to a running batch with only its cached prefix): ``len(token_ids)`` consecutive positions starting
    at ``first_position``, whose keys and values go in the cache columns right before the step's new
    column (left empty for them when the row joined)."""

    row: int
    token_ids: tuple[int, ...]
    first_position: int


@dataclass(frozen=True)
class _FedTail:
    """A tail as one step feeds it: its rows among the step's rows and its queries' attention mask."""

    tail: TailTokens
    rows: slice
    mask_QL: torch.Tensor


@dataclass(frozen=True)
class _LayerWeights:
    """One decoder layer's tensors and products (``envsuite.engine.kernels.Product``: a weight in the
    layout the engine chose for it, a kernel per row count).

    ``qkv`` is one product of the query, key and value projections' stacked rows where they could be
    fused (measured at batch 8-32 on SmolLM2: as fast or faster than three; the key/value products
    alone are too narrow to use the cores well), else the three products; ``mlp_in`` likewise the gate
    and up projections (one product, or two). The engine fuses them when it lays the model out
    (``lay_out_frozen_linears``); on a model as loaded (``nn.Linear`` layers) the query, key and value
    weights become views of one stacked tensor (:func:`_fuse`: one copy in all, the model's modules see
    the same values) and gate and up stay separate.
    """

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: tuple[Product, ...]
    o: Product
    mlp_in: tuple[Product, ...]
    down: Product


def llama_decoder(
    model: PreTrainedModel, plain_path: ProductPath | None = None, native: bool = False, captured: bool = True
) -> LlamaDecoder | None:
    """A :class:`LlamaDecoder` for ``model``, or None when the model is not a plain Llama.

    Layers the engine laid out (``FrozenLinear``, fused parts) run their own products; plain linear
    layers run through ``plain_path`` where given (a plain-weight path), else ``F.linear`` (oneDNN for a
    ``OneDnnLinear``). With ``native`` the step's norms and attention run envsuite's native kernels
    where they are loaded and fit the model (fp32 on the CPU, heads of 16 to 128 floats in steps of 16),
    else torch's; with ``captured`` too, a step's layers run as one native call where it covers the
    model (``_captured_step``)."""
    if not lean_step_covers(model.config):
        return None
    return LlamaDecoder(model, plain_path, native=native and _native_step_fits(model), captured=captured)


def lean_step_covers(config: Any) -> bool:
    """Whether the lean step runs a model of ``config`` (else :func:`llama_decoder` gives None)."""
    if getattr(config, "model_type", None) not in _SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "pretraining_tp", 1) != 1 or getattr(config, "sliding_window", None):
        return False
    return getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager")


def _native_step_fits(model: PreTrainedModel) -> bool:
    """Whether the native norm and attention kernels can run ``model``'s step (loading them if so)."""
    config = model.config
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    norm = _weight(model.get_decoder().norm)
    fits = (
        onednn_fits(norm)  # fp32 on the CPU (the embedding may have taken the LM head's panels)
        and head_dim % 16 == 0
        and head_dim <= 128
        and heads // int(config.num_key_value_heads) <= 64
    )
    return fits and native_kernels().available


class LlamaDecoder:
    """Feeds one token per row through a Llama model and its KV cache (see module docstring).

    It reads the model's tensors and products when it is built; on a model as loaded it points the
    query/key/value projections at rows of one fused tensor (same values, one copy). The sampling
    engine's model is frozen (new weights come as a new model, with a new decoder); an in-place change
    to a fused projection's weight is still seen by both, as they share the memory.

    Where the engine laid the model's layers out (``lay_out_frozen_linears``: each product on the
    layout and kernels measured fastest here), the step runs the same products. With ``native`` (the
    caller checked that they run here) its RMS norms, its rotary embeddings (with the split of the fused
    q/k/v product into heads), its one-token attention and its MLP's SiLU(gate) * up run envsuite's
    native kernels (``envsuite/engine/kernels/_native_step.cpp``: one call each instead of torch's several
    operations, the same arithmetic up to float rounding); the prompt tails' attention stays SDPA. With
    ``captured`` as well, a step without prompt tails runs all its layers in one native call
    (:attr:`captured`; ``_captured_step``), the same kernels in the same order.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        plain_path: ProductPath | None = None,
        native: bool = False,
        captured: bool = True,
    ) -> None:
        inner: Any = model.get_decoder()
        config = model.config
        self.embed: torch.nn.Module = inner.embed_tokens
        self.rotary: torch.nn.Module = inner.rotary_emb
        self.final_norm = _weight(inner.norm)
        self.eps = float(config.rms_norm_eps)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.group = self.heads // self.kv_heads
        """Query heads per key/value head."""
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.scaling = self.head_dim**-0.5
        self.rotary_table = (
            RotaryTable(self.rotary, self.head_dim)
            if static_rotary(self.rotary) and self.head_dim % VECTOR_CHUNK == 0
            else None
        )
        """The rotary module's values by position, where they never change and a head is whole vector
        chunks (``_rotary_table``); else the module runs every step."""
        first: Any = inner.layers[0]
        self.act: torch.nn.Module = first.mlp.act_fn
        self.q_size = self.heads * self.head_dim
        self.kv_size = self.kv_heads * self.head_dim
        self.native = native
        self.native_silu = native and getattr(config, "hidden_act", None) in ("silu", "swish")
        """The MLP's SiLU(gate) * up as one native call (a fused gate/up product's output)."""
        products = _Products(plain_path)
        self.layers = [products.layer(layer) for layer in inner.layers]
        self.lm_head = products.of(model.get_output_embeddings())
        self.captured: CapturedLayers | None = None
        """The layer stack as one native call (None: the step runs its layers operation by operation)."""
        self.captured_at: tuple[bool, ...] = (True,) * len(ROW_BUCKETS)
        """Per row bucket (``ROW_BUCKETS``): whether a step of that many rows runs :attr:`captured`
        (where there is one); else its layers one operation at a time (``_step_choice`` measures which)."""
        if captured and self.native_silu:
            self.captured = CapturedLayers.of(
                self.layers,
                self.final_norm,
                self.lm_head,
                heads=self.heads,
                kv_heads=self.kv_heads,
                head_dim=self.head_dim,
                eps=self.eps,
                scale=self.scaling,
            )

    def step(
        self,
        input_ids_B: torch.Tensor,
        position_ids_B: torch.Tensor,
        mask_B_L: torch.Tensor,
        cache_layers: Sequence[AppendingLayer],
        tails: Sequence[TailTokens] = (),
    ) -> torch.Tensor:
        """Next-token logits ``(B, V)`` for one new token per row.

        ``mask_B_L`` covers the cached positions and the new one (its last column); the new keys and
        values are appended to ``cache_layers``. Rows with ``tails`` first feed those tokens in the
        same pass (their rows of the layer products ride along with the batch's); the mask must
        already cover their columns.
        """
        batch = input_ids_B.shape[0]
        ids = input_ids_B
        positions = position_ids_B
        if tails:
            ids = torch.cat([ids, _tail_tensor(tails, lambda t: t.token_ids, ids.device)])
            positions = torch.cat([positions, _tail_tensor(tails, _tail_positions, ids.device)])
        hidden = self.embed(ids[:, None])
        if self.rotary_table is not None:
            cos, sin = self.rotary_table(hidden, positions)
            cos, sin = cos[:, None, None, :], sin[:, None, None, :]
        else:
            cos, sin = self.rotary(hidden, positions[:, None])
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # One mask for every layer; with no padding at all none is needed (a one-token query attends
        # to every cached position).
        mask = self.attention_mask(mask_B_L)
        if self.captured is not None and not tails and self.captured_at[bucket_index(batch)]:
            logits = self.captured.run(hidden, cos, sin, mask, cache_layers)
            if logits is not None:
                return logits
        fed = self._fed_tails(tails, mask_B_L, batch)
        for weights, layer in zip(self.layers, cache_layers, strict=True):
            hidden = self._layer(hidden, weights, cos, sin, mask, layer, batch, fed)
        hidden = self._rms_norm(hidden[:batch], self.final_norm)
        return self.lm_head(hidden)[:, -1, :]

    def _layer(
        self,
        hidden_B1D: torch.Tensor,
        w: _LayerWeights,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: AppendingLayer,
        batch: int,
        fed: Sequence[_FedTail],
    ) -> torch.Tensor:
        # hidden_B1D: the batch's rows (one token each), then every tail token (one row each).
        rows = hidden_B1D.shape[0]
        x = self._rms_norm(hidden_B1D, w.input_norm)
        qkv = w.qkv[0](x) if len(w.qkv) == 1 else torch.cat([product(x) for product in w.qkv], dim=-1)
        query, key, value = self._heads(qkv, cos, sin, rows)
        if rows == batch:
            keys, values = cache.update(key, value)
        else:
            keys, values = cache.update(key[:batch], value[:batch])
        for f in fed:
            # Into the row's columns right before the new one (the pending token's attention below
            # sees them): (N, kv_heads, 1, head_dim) -> (kv_heads, N, head_dim), the cache's layout.
            columns = slice(keys.shape[2] - 1 - len(f.tail.token_ids), keys.shape[2] - 1)
            keys[f.tail.row, :, columns] = key[f.rows, :, 0].transpose(0, 1)
            values[f.tail.row, :, columns] = value[f.rows, :, 0].transpose(0, 1)
        # Each key/value head's query heads become that head's queries (transformers' pack_gqa), so
        # the cache is never repeated per query head.
        grouped = query[:batch].reshape(batch, self.kv_heads, self.group, self.head_dim)
        attn = self.attend(grouped, keys, values, mask)
        if self.native:  # contiguous (B, kv heads, group, D): the heads' order already
            attn = attn.reshape(batch, 1, -1)
        else:
            attn = attn.reshape(batch, self.heads, 1, self.head_dim).transpose(1, 2).reshape(batch, 1, -1)
        if fed:
            attn = torch.cat([attn, *(self._tail_attention(f, query[f.rows], keys, values) for f in fed)])
        hidden_B1D = hidden_B1D + w.o(attn)
        x = self._rms_norm(hidden_B1D, w.post_norm)
        if len(w.mlp_in) == 1 and self.native_silu:
            return hidden_B1D + w.down(torch.ops.envsuite.silu_mul(w.mlp_in[0](x)))
        if len(w.mlp_in) == 1:
            gate, up = w.mlp_in[0](x).chunk(2, dim=-1)
        else:
            gate, up = (product(x) for product in w.mlp_in)
        mlp = self.act(gate) * up
        return hidden_B1D + w.down(mlp)

    def _heads(
        self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query ``(rows, heads, 1, D)``, key and value ``(rows, kv_heads, 1, D)`` heads of the fused
        product, query and key rotated."""
        if self.native:
            heads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = torch.ops.envsuite.rotary_split(
                qkv, cos, sin, self.heads, self.kv_heads
            )
            return heads
        k_end = self.q_size + self.kv_size
        # Rotary embeddings on the query and key heads at once: the same elementwise arithmetic as
        # rotating each on its own, in half the operations.
        qk = qkv[..., :k_end].view(rows, 1, -1, self.head_dim).transpose(1, 2)
        qk = qk * cos + _rotate_half(qk) * sin
        value = qkv[..., k_end:].reshape(rows, 1, -1, self.head_dim).transpose(1, 2)
        return qk[:, : self.heads], qk[:, self.heads :], value

    def _fed_tails(self, tails: Sequence[TailTokens], mask_B_L: torch.Tensor, batch: int) -> list[_FedTail]:
        """Each tail's rows (after the batch's ``batch`` rows, in order) and mask, once per step."""
        fed, start = [], batch
        for tail in tails:
            end = start + len(tail.token_ids)
            fed.append(_FedTail(tail, slice(start, end), _tail_mask(tail, mask_B_L, self.group)))
            start = end
        return fed

    def _tail_attention(
        self, fed: _FedTail, query_N: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        """A tail's ``N`` queries attending causally over its row (``fed.mask_QL``: :func:`_tail_mask`),
        its own keys and values already in the cache; returns ``(N, 1, q_size)``."""
        tail, group = fed.tail, self.group
        count = len(tail.token_ids)
        # Queries ordered (kv head, token, query head of the group), as the mask's rows are.
        grouped = query_N[:, :, 0].reshape(count, self.kv_heads, group, self.head_dim).transpose(0, 1)
        grouped = grouped.reshape(1, self.kv_heads, count * group, self.head_dim)
        row = slice(tail.row, tail.row + 1)
        attn = F.scaled_dot_product_attention(
            grouped, keys[row], values[row], attn_mask=fed.mask_QL, scale=self.scaling
        )
        attn = attn.reshape(self.kv_heads, count, group, self.head_dim).transpose(0, 1)
        return attn.reshape(count, 1, self.q_size)

    def attention_mask(self, mask_B_L: torch.Tensor) -> torch.Tensor | None:
        """The step's mask as :meth:`attend` takes it (None where no row has padding)."""
        if bool(mask_B_L.all()):
            return None
        mask = mask_B_L.bool()
        return mask if self.native else mask[:, None, None, :]

    def attend(
        self, grouped: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """One-token attention: ``grouped`` ``(B, kv_heads, group, head_dim)`` queries over the cache's
        ``keys``/``values`` ``(B, kv_heads, L, head_dim)``, ``mask`` from :meth:`attention_mask`."""
        if self.native:
            out: torch.Tensor = torch.ops.envsuite.decode_attention(grouped, keys, values, mask, self.scaling)
            return out
        return F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=self.scaling)

    def _rms_norm(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.native:
            normed: torch.Tensor = torch.ops.envsuite.rms_norm(hidden, weight, self.eps)
            return normed
        # torch's fused kernel: the arithmetic of transformers' LlamaRMSNorm (mean of squares, rsqrt,
        # scale) in one operation instead of six (no difference on the inputs checked; the tests hold
        # the lean step to the forward pass's logprobs).
        return F.rms_norm(hidden, (hidden.shape[-1],), weight, self.eps)


def _tail_positions(tail: TailTokens) -> Sequence[int]:
    return range(tail.first_position, tail.first_position + len(tail.token_ids))


def _tail_tensor(
    tails: Sequence[TailTokens], values: Callable[[TailTokens], Sequence[int]], device: torch.device
) -> torch.Tensor:
    return torch.tensor([v for tail in tails for v in values(tail)], dtype=torch.long, device=device)


def _tail_mask(tail: TailTokens, mask_B_L: torch.Tensor, group: int) -> torch.Tensor:
    """``(group * N, L)``: tail token ``j`` (``N`` of them, in the columns right before the last) sees
    its row's real columns up to its own; each token's row repeated for its query heads."""
    count, width = len(tail.token_ids), mask_B_L.shape[1]
    own_column = torch.arange(width - 1 - count, width - 1, device=mask_B_L.device)
    causal = torch.arange(width, device=mask_B_L.device)[None, :] <= own_column[:, None]
    allowed = causal & mask_B_L[tail.row].bool()[None, :]
    return allowed.repeat_interleave(group, dim=0)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _weight(module: Any) -> torch.Tensor:
    weight: torch.Tensor = module.weight
    return weight.detach()


def _bias(module: Any) -> torch.Tensor | None:
    bias: torch.Tensor | None = module.bias
    return None if bias is None else bias.detach()


class _Products:
    """The step's products for a model's layers (see :func:`llama_decoder`)."""

    def __init__(self, plain_path: ProductPath | None) -> None:
        self.plain_path = plain_path

    def of(self, linear: Any) -> Product:
        """The product a layer runs: its own where the engine laid it out, else one on its plain weight."""
        if isinstance(linear, FrozenLinear):
            return linear.product
        return self.plain(_weight(linear), _bias(linear), isinstance(linear, OneDnnLinear))

    def plain(self, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool = False) -> Product:
        path = self.plain_path
        if path is None:
            path = ProductPath.ONEDNN if onednn and onednn_available() else ProductPath.F_LINEAR
        if path is not ProductPath.F_LINEAR and not onednn_fits(weight):
            path = ProductPath.F_LINEAR  # a GPU or half-precision model
        return Product.everywhere(weight, bias, path)

    def group(self, linears: list[Any]) -> tuple[Product, ...]:
        """One product for layers the engine fused, else one per layer."""
        first = linears[0]
        if isinstance(first, FusedPart) and all(getattr(m, "fused", None) is first.fused for m in linears):
            return (first.fused.product,)
        return tuple(self.of(linear) for linear in linears)

    def layer(self, layer: Any) -> _LayerWeights:
        attn, mlp = layer.self_attn, layer.mlp
        projections = [attn.q_proj, attn.k_proj, attn.v_proj]
        if all(type(m) in (torch.nn.Linear, OneDnnLinear) for m in projections):
            fused, fused_bias = _fuse(projections)
            qkv: tuple[Product, ...] = (self.plain(fused, fused_bias, isinstance(attn.q_proj, OneDnnLinear)),)
        else:
            qkv = self.group(projections)
        return _LayerWeights(
            input_norm=_weight(layer.input_layernorm),
            post_norm=_weight(layer.post_attention_layernorm),
            qkv=qkv,
            o=self.of(attn.o_proj),
            mlp_in=self.group([mlp.gate_proj, mlp.up_proj]),
            down=self.of(mlp.down_proj),
        )


def _fuse(linears: list[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for linear layers that read the same input: their rows, stacked.

    Each module is then given its rows of the fused tensor as its weight (a view: consecutive rows of
    a contiguous tensor are contiguous), so the model's forward computes exactly what it did and the
    separate tensors are freed unless something else holds them.
    """
    weights = [_weight(linear) for linear in linears]
    biases = [_bias(linear) for linear in linears]
    fused = _stacked_view(weights)
    if fused is None:
        fused = torch.cat(weights)
    fused_bias = None
    bias_parts = zero_filled_biases(linears)
    if bias_parts is not None:
        fused_bias = _stacked_view(bias_parts)
        if fused_bias is None:
            fused_bias = torch.cat(bias_parts)
    start = 0
    for linear, weight, bias in zip(linears, weights, biases, strict=True):
        end = start + weight.shape[0]
        linear.weight = torch.nn.Parameter(fused[start:end], requires_grad=linear.weight.requires_grad)
        if bias is not None:
            assert fused_bias is not None
            linear.bias = torch.nn.Parameter(fused_bias[start:end], requires_grad=linear.bias.requires_grad)
        start = end
    return fused, fused_bias


def _stacked_view(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """``parts`` as one tensor without a copy when they already are consecutive rows of one tensor (a
    second decoder on the same model), else None."""
    first = parts[0]
    offset = first.storage_offset()
    for part in parts:
        if (
            not part.is_contiguous()
            or part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or part.storage_offset() != offset
        ):
            return None
        offset += part.numel()
    rows = sum(part.shape[0] for part in parts)
    return first.as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())
