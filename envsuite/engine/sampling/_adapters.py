"""Multi-adapter decode steps: rows of different LoRA adapters of one base model in one forward pass.

A sampling engine may serve several LoRA adapters of its base model at once (``SamplingEngine.add_variant``).
While every running row belongs to one adapter the engine steps on that adapter's merged weights (the
fast path, unchanged). When rows of several adapters run together, :class:`MixedDecoder` steps them all
on the *unmerged* base: each layer's base products run once for every row, and each adapted product
adds its rows' low-rank terms, ``scale * (x @ A.T) @ B.T`` of the row's own adapter.

The adapters' factors of one product site (the fused q/k/v product, o, the fused gate/up product, down,
the LM head) are laid side by side (:class:`_Site`): ``A`` stacks every adapter's down projections
(``[R, in]``, ``R`` the sum of their ranks, per fused part), ``B`` their up projections with the scale
folded in, each in its own part's output columns (``[R, out]``, zeros elsewhere). With the native
kernels a site's terms are one call (``torch.ops.envsuite.low_rank_add_``,
``envsuite/engine/kernels/_native_adapters.cpp``): each row computes only its own adapter's columns and
reads only its own part's blocks of ``B``, given the row's column span; rows of one adapter share the
loads of its factors. Without them (torch's path) a step costs two thin products per site whatever the
number of adapters, ``(x @ A.T) * mask @ B``, where the step's ``mask`` (rows by ``R``) keeps each row's
own adapter's columns and zeros the others', so a row gets exactly its adapter's term (its other
columns add exact zeros). The bytes grow with the adapters' rank: at rank 32 on SmolLM2-135M each
adapter's factors are ~9% of a layer's base weights (0.33 M floats against 3.54 M); torch's path reads
``B``'s zero blocks too (0.97 M floats a layer at two adapters, 1.94 M at four).

A row's logits so differ from its merged-weight logits only by rounding: ``x @ (W + s B A).T`` against
``x @ W.T + s (x @ A.T) @ B.T``, the same sums in another order (docs/backend_sampling.md gives the
tolerance the tests hold it to).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from envsuite.engine.sampling._captured_step import StepTerms
from envsuite.engine.sampling._llama_decode import AppendingLayer, LlamaDecoder, TailTokens
from envsuite.engine.weights import LoraFactors, LoraModule

_LAYER_SITES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("qkv", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    ("o", ("self_attn.o_proj",)),
    ("mlp_in", ("mlp.gate_proj", "mlp.up_proj")),
    ("down", ("mlp.down_proj",)),
)
"""A Llama layer's product sites (as the lean decoder runs them) and the modules each one fuses."""


@dataclass(frozen=True)
class _StepRows:
    """Which adapter columns each of a step's rows takes: ``spans`` for the native op (``(rows, 2)``: the
    row's adapter's first column and width within a part's ``R``; width 0 for a base row), else torch's
    ``masks`` (per fused-part count, ``(rows, parts * R)``: 1 on the row's adapter's columns)."""

    spans: torch.Tensor | None
    masks: Mapping[int, torch.Tensor]

    def first(self, rows: int) -> _StepRows:
        """The first ``rows`` rows' (a step's batch without its prompt-tail rows)."""
        if self.spans is not None:
            return _StepRows(self.spans[:rows], {})
        return _StepRows(None, {parts: mask[:rows] for parts, mask in self.masks.items()})


@dataclass(frozen=True)
class _Site:
    """One product site's adapters side by side: ``a`` ``[parts * R, in]``, ``b`` ``[parts * R, out]``."""

    a: torch.Tensor
    b: torch.Tensor
    part_outputs: tuple[int, ...]
    """Each fused part's output width, in order (they sum to ``out``)."""

    def add(self, out: torch.Tensor, x: torch.Tensor, rows: _StepRows) -> torch.Tensor:
        """``out`` (the base product of ``x``) plus each row's adapter term (the native op: in place)."""
        if rows.spans is not None:
            return torch.ops.envsuite.low_rank_add_(out, x, self.a, self.b, rows.spans, self.part_outputs)
        shape = out.shape
        low = torch.mm(x.reshape(-1, x.shape[-1]), self.a.T).mul_(rows.masks[len(self.part_outputs)])
        return torch.addmm(out.reshape(-1, shape[-1]), low, self.b).view(shape)


def _site(names: Sequence[str], adapters: Sequence[LoraFactors], widths: Sequence[int]) -> _Site | None:
    """The site of modules ``names`` (their outputs side by side in that order); None when no adapter
    touches any of them."""
    if not any(name in adapter.modules for adapter in adapters for name in names):
        return None
    out_sizes = [int(_module_of(adapters, name).base_weight.shape[0]) for name in names]
    rank = sum(widths)
    a_parts: list[torch.Tensor] = []
    b = None
    column = 0
    for part, name in enumerate(names):
        start = sum(out_sizes[:part])
        for adapter, width in zip(adapters, widths, strict=True):
            module = adapter.modules.get(name)
            if module is None:
                a_parts.append(torch.zeros(width, int(_module_of(adapters, name).a.shape[1])))
            else:
                a_parts.append(_padded_rows(module.a, width))
                if b is None:
                    b = module.b.new_zeros(len(names) * rank, sum(out_sizes))
                lora_rank = module.a.shape[0]
                b[column : column + lora_rank, start : start + out_sizes[part]] = module.b.T * module.scale
            column += width
    assert b is not None
    a = torch.cat([a.to(b.device) for a in a_parts]).contiguous()
    return _Site(a=a, b=b.contiguous(), part_outputs=tuple(out_sizes))


def _module_of(adapters: Sequence[LoraFactors], name: str) -> LoraModule:
    """Some adapter's factors of module ``name`` (for its shapes)."""
    for adapter in adapters:
        if name in adapter.modules:
            return adapter.modules[name]
    raise ValueError(f"{name}: no adapter covers it while another module of its fused product is adapted")


def _padded_rows(a: torch.Tensor, width: int) -> torch.Tensor:
    return a if a.shape[0] == width else torch.cat([a, a.new_zeros(width - a.shape[0], a.shape[1])])


class AdapterDeltas:
    """The low-rank terms of a fixed set of adapters, laid out by product site (module docstring)."""

    def __init__(self, model: PreTrainedModel, adapters: Mapping[int, LoraFactors]) -> None:
        self.variants = tuple(adapters)
        """The adapters' variant ids, in column order (variant 0, the base, has no adapter here)."""
        factors = list(adapters.values())
        # Every adapter gets the same columns at every site (its largest rank; absent modules are zeros).
        self.widths = [max(int(m.a.shape[0]) for m in f.modules.values()) for f in factors]
        names = {id(module): name for name, module in model.named_modules()}
        self.layers: list[dict[str, _Site]] = []
        for layer in model.get_decoder().layers:
            sites: dict[str, _Site] = {}
            for site_name, suffixes in _LAYER_SITES:
                full = [names[id(layer.get_submodule(suffix))] for suffix in suffixes]
                site = _site(full, factors, self.widths)
                if site is not None:
                    sites[site_name] = site
            self.layers.append(sites)
        head = model.get_output_embeddings()
        self.lm_head = _site([names[id(head)]], factors, self.widths)

    def step_rows(self, row_variants: Sequence[int], device: torch.device, native: bool) -> _StepRows:
        """The adapter columns of a step's rows (by variant id; 0, the base, takes none): spans for the
        native op, else masks."""
        return _step_rows(self.variants, self.widths, row_variants, device, native)


def _step_rows(
    variants: Sequence[int],
    widths: Sequence[int],
    row_variants: Sequence[int],
    device: torch.device,
    native: bool,
) -> _StepRows:
    """:meth:`AdapterDeltas.step_rows` for adapters ``variants`` of ``widths`` columns each, in order."""
    starts = {v: sum(widths[:k]) for k, v in enumerate(variants)}
    width = dict(zip(variants, widths, strict=True))
    if native:
        spans = [(starts.get(v, 0), width.get(v, 0)) for v in row_variants]
        return _StepRows(torch.tensor(spans, dtype=torch.int64, device=device).reshape(-1, 2), {})
    owner = torch.tensor([v for v, w in zip(variants, widths, strict=True) for _ in range(w)], device=device)
    rows = torch.tensor(list(row_variants), device=device)
    mask = (rows[:, None] == owner[None, :]).to(torch.float32)
    return _StepRows(None, {parts: mask.repeat(1, parts) if parts > 1 else mask for parts in (1, 2, 3)})


@dataclass
class MixedStepCounts:
    """What an engine's mixed steps ran (shared by its mixed-step decoders)."""

    captured: int = 0
    """Mixed steps run as one native call (the base's captured stack with the rows' terms)."""


class MixedDecoder:
    """A lean decode step on the base model's decoder, each row with its own adapter's terms.

    It has the lean decoder's ``step`` signature, so a :class:`KVBatch` steps through it unchanged;
    :meth:`for_rows` sets the rows' adapters before each step. Where the base decoder has a captured
    stack and the terms run natively, a step without prompt tails is one native call
    (``decode_layers_adapted`` with :class:`StepTerms`: each site's terms added into its product, the
    stack as one team of threads or by op, as the base's step choice runs it at that row count; its
    ``captured_at`` is not consulted, since the alternative here is the slower Python step); else it runs
    the base decoder's own tensors and kernels operation by operation from Python.
    """

    def __init__(
        self, base: LlamaDecoder, deltas: AdapterDeltas, counts: MixedStepCounts | None = None
    ) -> None:
        self.base = base
        self.deltas = deltas
        self.counts = counts if counts is not None else MixedStepCounts()
        self.native = base.native and all(
            site.a.dtype == torch.float32 and site.a.device.type == "cpu"
            for site in (*(s for layer in deltas.layers for s in layer.values()), deltas.lm_head)
            if site is not None
        )
        """Whether each site's terms run as one native call (``low_rank_add_``), else torch's operations."""
        sites = [*(layer.get(name) for layer in deltas.layers for name, _ in _LAYER_SITES), deltas.lm_head]
        empty = torch.empty(0)
        self._site_a = [empty if site is None else site.a for site in sites]
        self._site_b = [empty if site is None else site.b for site in sites]
        self._row_variants: list[int] = []

    def for_rows(self, row_variants: Sequence[int]) -> MixedDecoder:
        """Set the step's rows' variants (the batch's rows, then one per fed prompt-tail token)."""
        self._row_variants = list(row_variants)
        return self

    def step(
        self,
        input_ids_B: torch.Tensor,
        position_ids_B: torch.Tensor,
        mask_B_L: torch.Tensor,
        cache_layers: Sequence[AppendingLayer],
        tails: Sequence[TailTokens] = (),
    ) -> torch.Tensor:
        """Next-token logits ``(B, V)``, as :meth:`LlamaDecoder.step` with each row's adapter added."""
        d = self.base
        batch = input_ids_B.shape[0]
        ids, positions = input_ids_B, position_ids_B
        if tails:
            ids = torch.cat(
                [ids, torch.tensor([t for tail in tails for t in tail.token_ids], device=ids.device)]
            )
            more = [
                p
                for tail in tails
                for p in range(tail.first_position, tail.first_position + len(tail.token_ids))
            ]
            positions = torch.cat([positions, torch.tensor(more, device=ids.device)])
        if len(self._row_variants) != ids.shape[0]:
            raise ValueError(f"{len(self._row_variants)} row variants for a step of {ids.shape[0]} rows")
        rows = self.deltas.step_rows(self._row_variants, ids.device, self.native)
        hidden = d.embed(ids[:, None])
        if d.rotary_table is not None:
            cos, sin = d.rotary_table(hidden, positions)
            cos, sin = cos[:, None, None, :], sin[:, None, None, :]
        else:
            cos, sin = d.rotary(hidden, positions[:, None])
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask = d.attention_mask(mask_B_L)
        if rows.spans is not None and not tails and d.captured is not None:
            terms = StepTerms(self._site_a, self._site_b, rows.spans)
            logits = d.captured.run(hidden, cos, sin, mask, cache_layers, terms)
            if logits is not None:
                self.counts.captured += 1
                return logits
        fed = d._fed_tails(tails, mask_B_L, batch)
        for weights, sites, layer in zip(d.layers, self.deltas.layers, cache_layers, strict=True):
            hidden = self._layer(hidden, weights, sites, rows, (cos, sin, mask), layer, batch, fed)
        hidden = d._rms_norm(hidden[:batch], d.final_norm)
        logits = d.lm_head(hidden)
        if self.deltas.lm_head is not None:
            logits = self.deltas.lm_head.add(logits, hidden, rows.first(batch))
        return logits[:, -1, :]

    def _layer(
        self,
        hidden_B1D: torch.Tensor,
        w: Any,
        sites: Mapping[str, _Site],
        step_rows: _StepRows,
        rotary_and_mask: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
        cache: AppendingLayer,
        batch: int,
        fed: Sequence[Any],
    ) -> torch.Tensor:
        # The lean decoder's layer (LlamaDecoder._layer), each product followed by its site's terms.
        d = self.base
        cos, sin, mask = rotary_and_mask
        rows = hidden_B1D.shape[0]
        x = d._rms_norm(hidden_B1D, w.input_norm)
        qkv = _product(w.qkv, x, sites.get("qkv"), step_rows)
        query, key, value = d._heads(qkv, cos, sin, rows)
        keys, values = cache.update(key[:batch], value[:batch]) if rows != batch else cache.update(key, value)
        for f in fed:
            columns = slice(keys.shape[2] - 1 - len(f.tail.token_ids), keys.shape[2] - 1)
            keys[f.tail.row, :, columns] = key[f.rows, :, 0].transpose(0, 1)
            values[f.tail.row, :, columns] = value[f.rows, :, 0].transpose(0, 1)
        grouped = query[:batch].reshape(batch, d.kv_heads, d.group, d.head_dim)
        attn = d.attend(grouped, keys, values, mask)
        if d.native:
            attn = attn.reshape(batch, 1, -1)
        else:
            attn = attn.reshape(batch, d.heads, 1, d.head_dim).transpose(1, 2).reshape(batch, 1, -1)
        if fed:
            attn = torch.cat([attn, *(d._tail_attention(f, query[f.rows], keys, values) for f in fed)])
        hidden_B1D = hidden_B1D + _product((w.o,), attn, sites.get("o"), step_rows)
        x = d._rms_norm(hidden_B1D, w.post_norm)
        up_in = _product(w.mlp_in, x, sites.get("mlp_in"), step_rows)
        if len(w.mlp_in) == 1 and d.native_silu:
            mlp = torch.ops.envsuite.silu_mul(up_in)
        else:
            gate, up = up_in.chunk(2, dim=-1)
            mlp = d.act(gate) * up
        return hidden_B1D + _product((w.down,), mlp, sites.get("down"), step_rows)


def _product(products: Sequence[Any], x: torch.Tensor, site: _Site | None, rows: _StepRows) -> torch.Tensor:
    """The base products of ``x`` (fused, or side by side), plus the site's terms where it has one."""
    out = products[0](x) if len(products) == 1 else torch.cat([product(x) for product in products], dim=-1)
    return out if site is None else site.add(out, x, rows)
