"""The lean decode step captured: every decoder layer of a step in one native call.

The lean step (``_llama_decode``) runs a Llama layer as about 23 torch operations from Python: at
SmolLM2-135M's 30 layers that is ~700 dispatches a step, 2-3 ms at batch 1 on the AMD EPYC box where
the products themselves take ~10 (docs/benchmarks.md). :class:`CapturedLayers` hands the whole layer
stack to ``torch.ops.envsuite.decode_layers`` (``envsuite/engine/kernels/_native_layers.cpp``), which calls the
same kernels in the same order from C++: the norms, the products on the layouts and paths the engine's
calibration chose for this row count, rotary embeddings, the new keys and values written straight into
the cache's free column, one-token attention, the residual adds. Where every product of a row count
runs envsuite's panels, the call runs the whole stack in one parallel region, its threads meeting at a
barrier between phases (``_native_layers.cpp``; :attr:`CapturedLayers.team_by_bucket`). Its logits
equal the step-by-step Python's (tested: the same tokens and logprobs).

A multi-adapter step hands it each row's LoRA terms too (:class:`StepTerms`; ``decode_layers_adapted``):
each product's terms are added into it before anything reads it, as a team or by op.

It covers what the engine builds by default: fp32 on the CPU with the native kernels loaded, fused q/k/v
and gate/up products without biases, SiLU, a :class:`~envsuite.engine.sampling._kv_cache_layer.GrowableLayer`
cache, one token per row (no prompt tails). Anything else returns None from :meth:`CapturedLayers.of` or
:meth:`CapturedLayers.run`, and the lean step runs its layers one operation at a time, as before.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

import torch

from envsuite.engine.kernels import ROW_BUCKETS, Product, ProductPath, bucket_index
from envsuite.engine.sampling._kv_cache_layer import GrowableLayer, advance_all, free_columns


class ProductCode(enum.IntEnum):
    """How ``decode_layers`` runs a product (the C++ ``ProductCode``)."""

    F_LINEAR = 0
    ONEDNN = 1
    ROWS = 2
    PANELS = 3
    PANELS_BY_OP = 4
    """Panels, each product its own op: the stack then runs by op, not as one team (``_step_choice``)."""


_CODE_OF_PATH = {
    ProductPath.F_LINEAR: ProductCode.F_LINEAR,
    ProductPath.ONEDNN: ProductCode.ONEDNN,
    ProductPath.ONEDNN_REORDERED: ProductCode.ONEDNN,
    ProductPath.ROWS: ProductCode.ROWS,
    ProductPath.PANELS: ProductCode.PANELS,
}


class LayerTensors(Protocol):
    """One decoder layer's tensors and products, as the lean step holds them."""

    @property
    def input_norm(self) -> torch.Tensor: ...
    @property
    def post_norm(self) -> torch.Tensor: ...
    @property
    def qkv(self) -> tuple[Product, ...]: ...
    @property
    def o(self) -> Product: ...
    @property
    def mlp_in(self) -> tuple[Product, ...]: ...
    @property
    def down(self) -> Product: ...


@dataclass(frozen=True)
class StepTerms:
    """A multi-adapter step's per-row LoRA terms as ``decode_layers_adapted`` takes them (``_adapters.py``
    lays them out): each product's site's terms are added into it before anything reads it."""

    a: list[torch.Tensor]
    """Per product site (per layer q/k/v, o, gate/up, down; then the LM head) the adapters' down
    projections side by side; an empty tensor where no adapter touches the site."""
    b: list[torch.Tensor]
    """The sites' up projections (scale folded in), as ``a``."""
    spans: torch.Tensor
    """``(rows, 2)`` int64: each row's adapter's first column and width within a part's columns."""


@dataclass(frozen=True)
class CapturedLayers:
    """A model's layer stack as ``decode_layers`` takes it (built once per decoder)."""

    weights: list[torch.Tensor]
    """Per layer: input norm, q/k/v, o, post-attention norm, gate/up, down (products in their layouts)."""
    codes_by_bucket: tuple[list[int], ...]
    """Per row bucket (``ROW_BUCKETS``): per layer the four products' :class:`ProductCode`."""
    team_by_bucket: tuple[bool, ...]
    """Per row bucket: whether ``decode_layers`` runs the stack as one team of threads (one parallel
    region for the step: every product on envsuite's panels) rather than op by op."""
    final_norm: torch.Tensor
    lm_head: torch.Tensor
    """The LM head's weight in its layout (the call returns the logits)."""
    lm_head_codes: tuple[int, ...]
    """Per row bucket: the LM head's :class:`ProductCode`."""
    vocab: int
    heads: int
    kv_heads: int
    intermediate: int
    eps: float
    scale: float

    @property
    def team_rows(self) -> tuple[int, ...]:
        """The row buckets (``ROW_BUCKETS``: up to that many rows) whose steps run as one team."""
        return tuple(rows for rows, team in zip(ROW_BUCKETS, self.team_by_bucket, strict=True) if team)

    def by_op_at(self, buckets: Sequence[bool]) -> CapturedLayers:
        """The same stack with the steps of the row buckets where ``buckets`` is true run by op rather
        than as a team (their panels products passed as :attr:`ProductCode.PANELS_BY_OP`)."""
        by_op = int(ProductCode.PANELS_BY_OP)

        def codes(bucket_codes: list[int]) -> list[int]:
            return [by_op if code == ProductCode.PANELS else code for code in bucket_codes]

        return replace(
            self,
            codes_by_bucket=tuple(
                codes(c) if off else c for c, off in zip(self.codes_by_bucket, buckets, strict=True)
            ),
            team_by_bucket=tuple(
                team and not off for team, off in zip(self.team_by_bucket, buckets, strict=True)
            ),
        )

    @classmethod
    def of(
        cls,
        layers: Sequence[LayerTensors],
        final_norm: torch.Tensor,
        lm_head: Product,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        eps: float,
        scale: float,
    ) -> CapturedLayers | None:
        """The stack of ``layers`` and the LM head, or None where ``decode_layers`` does not cover them
        (module docstring)."""
        weights: list[torch.Tensor] = []
        products: list[Product] = []
        for layer in layers:
            if len(layer.qkv) != 1 or len(layer.mlp_in) != 1:
                return None
            four = (layer.qkv[0], layer.o, layer.mlp_in[0], layer.down)
            if any(product.bias is not None for product in four):
                return None
            qkv, o, mlp_in, down = four
            weights += [layer.input_norm, qkv.weight, o.weight, layer.post_norm, mlp_in.weight, down.weight]
            products += four
        if lm_head.bias is not None or not products:
            return None
        if any(
            w.device.type != "cpu" or w.dtype != torch.float32 for w in [*weights, final_norm, lm_head.weight]
        ):
            return None
        codes = tuple(
            [int(_CODE_OF_PATH[product.paths[bucket]]) for product in products]
            for bucket in range(len(ROW_BUCKETS))
        )
        intermediate = products[3].in_features
        width = products[0].in_features
        team = tuple(
            bool(
                torch.ops.envsuite.decode_layers_team(
                    weights, bucket_codes, width, heads, kv_heads, head_dim, intermediate
                )
            )
            for bucket_codes in codes
        )
        head_codes = tuple(int(_CODE_OF_PATH[path]) for path in lm_head.paths)
        return cls(
            weights,
            codes,
            team,
            final_norm,
            lm_head.weight,
            head_codes,
            lm_head.out_features,
            heads,
            kv_heads,
            intermediate,
            eps,
            scale,
        )

    def run(
        self,
        hidden_B1D: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask_B_L: torch.Tensor | None,
        cache_layers: Sequence[object],
        terms: StepTerms | None = None,
    ) -> torch.Tensor | None:
        """The next-token logits ``(B, V)`` after every layer, the final norm and the LM head (with each
        row's adapter's ``terms`` where given), the new position appended to every cache layer; None
        (nothing written, nothing appended) where the cache is not one it can write."""
        batch = hidden_B1D.shape[0]
        free = free_columns(cache_layers, batch)
        if free is None:
            return None
        start, end = free.start, free.end
        if mask_B_L is not None and mask_B_L.shape[1] != end + 1 - start:
            return None
        call = torch.ops.envsuite.decode_layers if terms is None else torch.ops.envsuite.decode_layers_adapted
        out: torch.Tensor = call(
            hidden_B1D,
            cos,
            sin,
            mask_B_L,
            self.weights,
            self.codes_by_bucket[bucket := bucket_index(batch)],
            free.key_buffers,
            free.value_buffers,
            start,
            end,
            self.heads,
            self.kv_heads,
            self.intermediate,
            self.eps,
            self.scale,
            self.final_norm,
            self.lm_head,
            self.lm_head_codes[bucket],
            self.vocab,
            *((terms.a, terms.b, terms.spans) if terms is not None else ()),
        )
        advance_all(cast(Sequence[GrowableLayer], cache_layers))  # (free_columns checked their type)
        return out
