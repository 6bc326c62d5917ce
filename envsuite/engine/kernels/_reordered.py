"""A frozen model's linear layers on the weight layouts and kernels a :class:`KernelPlan` chose for them.

A sampling engine owns its frozen model, so a re-laid-out weight (oneDNN's reordered blocks, envsuite's
panels: ``_products``) can take the plain one's place at no extra memory. :func:`lay_out_frozen_linears`
does that to a model in place, each product as the plan says (``_calibration``: the fastest kernels
measured on this machine for the product's shape):

* an attention block's query, key and value projections, which read the same input, become one product
  (:class:`FusedProjections`: the block calls the three modules one after the other with the same
  tensor, and the first call computes all three outputs); a gated MLP's gate and up projections
  likewise. One product of the stacked rows instead of two or three: fewer, wider products;
* every other linear layer becomes a :class:`FrozenLinear` over its product;
* weights the caller still shares with another model (a training run's frozen base) and the other
  members of a fusable group one of whose members is such a weight keep their plain tensor (a copy in
  another layout would not replace it, only add to it), each its own product on the plain weight
  through the fastest plain path;
* an LM head tied to the input embedding (the embedding looks rows up in it) stays plain or takes
  envsuite's panel layout, from which rows can be read too: the embedding then becomes a
  :class:`PanelEmbedding` over the same panels (one copy of the weight, as before);
* the model's remaining parameters (embedding, norms) and the plain weights it keeps are copied out of
  the checkpoint file the model was memory-mapped from (unless shared), so that the mapping, whose
  pages of the replaced weights were read while laying them out, is released with them.

A model so changed is only for inference in this process: it has no state dict of the replaced weights
and cannot be trained or moved to another device. :func:`reorder_frozen_linears` is the same with every
product on oneDNN's reordered weights (the engine's default before the plan existed; benchmarks compare
it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from envsuite.engine.kernels._onednn import onednn_fits
from envsuite.engine.kernels._plan import KernelPlan, ProductSite, WeightUse, product_sites
from envsuite.engine.kernels._products import FrozenLinear, Layout, Product, ProductPath


class FusedProjections:
    """Linear layers reading the same input as one product (their weights' rows stacked).

    :meth:`part` gives one module per layer; calling them one after the other on the same input tensor
    computes the product once (the first call) and returns each its columns of the output. A part
    called on another input computes the product again, so any call order gives the right values.
    """

    def __init__(self, product: Product, sizes: Sequence[int]) -> None:
        self.product = product
        self.sizes = list(sizes)
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None
        self._served: set[int] = set()

    @classmethod
    def of(cls, linears: Sequence[torch.nn.Module], paths: Sequence[ProductPath]) -> FusedProjections:
        """The layers' weights stacked into one product on ``paths`` (a new tensor in their layout)."""
        weights = [_plain_weight(linear) for linear in linears]
        biases = zero_filled_biases(linears)
        stacked = torch.cat(weights)
        bias = None if biases is None else torch.cat(biases)
        return cls(Product.of_plain(stacked, bias, paths), [int(w.shape[0]) for w in weights])

    def part(self, index: int) -> FusedPart:
        start = sum(self.sizes[:index])
        return FusedPart(self, index, start, start + self.sizes[index])

    def output_for(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if self._output is None or x is not self._input or index in self._served:
            self._input, self._output, self._served = x, self.product(x), set()
        output = self._output
        self._served.add(index)
        if len(self._served) == len(self.sizes):
            # Every part has its columns: drop the references so the activations are freed.
            self._input = self._output = None
        return output


class FusedPart(torch.nn.Module):
    """One of :class:`FusedProjections`' layers: its columns of the shared product."""

    def __init__(self, fused: FusedProjections, index: int, start: int, end: int) -> None:
        super().__init__()
        self.in_features, self.out_features = fused.product.in_features, end - start
        self.fused, self.index, self.start, self.end = fused, index, start, end

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.output_for(x, self.index)[..., self.start : self.end]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fused part {self.index}"


class PanelEmbedding(torch.nn.Module):
    """An input embedding reading its rows from the tied LM head's panels (``(ceil(V / 16), D, 16)``:
    row ``t`` is ``panels[t // 16, :, t % 16]``), in place of the plain ``(V, D)`` weight they replaced.
    Inference only; the same values as the plain embedding (a gather, no arithmetic)."""

    def __init__(self, panels: torch.Tensor, num_embeddings: int) -> None:
        super().__init__()
        self.panels = panels
        self.num_embeddings, self.embedding_dim = num_embeddings, int(panels.shape[1])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Panels exist only where the native kernels are loaded (they pack them): one native gather.
        rows: torch.Tensor = torch.ops.envsuite.panel_rows(self.panels, input_ids, self.num_embeddings)
        return rows

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, rows read from the LM head's panels"


@dataclass(frozen=True)
class ReorderReport:
    """What :func:`lay_out_frozen_linears` did to a model's linear layers."""

    reordered: int
    """Linear layers now on a weight in another layout than the plain one (oneDNN's reordered blocks
    or envsuite's panels; each fused projection counted)."""
    fused_blocks: int
    """Groups of layers that became one product: an attention block's query/key/value projections, a
    gated MLP's gate and up projections."""
    kept: int
    """Linear layers on a plain weight (shared, tied to the embedding, not fp32 on the CPU, or where the
    plan found a plain-weight kernel fastest)."""
    panels: int = 0
    """Of ``reordered``, the layers on envsuite's panels."""


def lay_out_frozen_linears(
    model: torch.nn.Module, plan: KernelPlan, shared: Collection[int] = ()
) -> ReorderReport:
    """Put ``model``'s linear layers on the products ``plan`` chooses, in place (see module docstring).

    ``shared``: ids of weight tensors another live model also holds (kept plain and where they are).
    """
    counts = {"reordered": 0, "fused": 0, "kept": 0, "panels": 0}
    copied: set[int] = set(shared)
    for site in product_sites(model, shared):
        linears = site.linears
        choice = plan.choice(site.shape, site.use)
        if len(linears) > 1:
            fused = FusedProjections.of(linears, choice.paths)
            for index, name in enumerate(site.names):
                setattr(site.block, name, fused.part(index))
            counts["fused"] += 1
        else:
            weight = _plain_weight(linears[0])
            if choice.layout is Layout.PLAIN:
                _copy_out_once(weight, copied)
            product = Product.of_plain(weight, _bias(linears[0]), choice.paths)
            setattr(site.block, site.names[0], FrozenLinear(product))
            if site.use is WeightUse.EMBEDDED and choice.layout is Layout.PANELS:
                _embed_from_panels(model, site, product)
        key = "kept" if choice.layout is Layout.PLAIN else "reordered"
        counts[key] += len(linears)
        counts["panels"] += len(linears) if choice.layout is Layout.PANELS else 0
    counts["kept"] += sum(
        isinstance(m, torch.nn.Linear) and not onednn_fits(m.weight) for m in model.modules()
    )
    _copy_out_of_file_mappings(model, copied)
    return ReorderReport(counts["reordered"], counts["fused"], counts["kept"], counts["panels"])


def _embed_from_panels(model: torch.nn.Module, site: ProductSite, product: Product) -> None:
    """Point the embeddings that held ``site``'s (tied) weight at its panels instead."""
    weight = site.linears[0].weight
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Embedding) and module.weight is weight:
            model.set_submodule(name, PanelEmbedding(product.weight, product.out_features))


def reorder_frozen_linears(model: torch.nn.Module, shared: Collection[int] = ()) -> ReorderReport:
    """:func:`lay_out_frozen_linears` with every product on oneDNN's reordered weights (plain where it
    must stay plain, through oneDNN)."""
    return lay_out_frozen_linears(model, KernelPlan.forced(ProductPath.ONEDNN_REORDERED), shared)


def zero_filled_biases(linears: Sequence[torch.nn.Module]) -> list[torch.Tensor] | None:
    """The biases of linear layers to be fused into one product, zeros for a layer without one; None
    when no layer has a bias (the fused product then has none either)."""
    biases = [_bias(linear) for linear in linears]
    if all(bias is None for bias in biases):
        return None
    return [
        _plain_weight(linear).new_zeros(_plain_weight(linear).shape[0]) if bias is None else bias
        for linear, bias in zip(linears, biases, strict=True)
    ]


def _plain_weight(linear: torch.nn.Module) -> torch.Tensor:
    weight = linear.weight
    assert isinstance(weight, torch.Tensor)
    return weight


def _bias(linear: torch.nn.Module) -> torch.Tensor | None:
    bias = getattr(linear, "bias", None)
    return bias.detach() if isinstance(bias, torch.Tensor) else None


def _copy_out_once(tensor: torch.Tensor, copied: set[int]) -> None:
    """Give ``tensor`` (a parameter the model keeps, plain) memory of its own, once."""
    if id(tensor) in copied or tensor.device.type != "cpu" or tensor.is_mkldnn:
        return
    copied.add(id(tensor))
    with torch.no_grad():
        tensor.data = tensor.data.clone()


def _copy_out_of_file_mappings(model: torch.nn.Module, done: set[int]) -> None:
    """Give the model's remaining parameters and buffers memory of their own (see module docstring).

    transformers loads safetensors checkpoints as views of one memory-mapped file; the mapping lives
    while any view does, and its pages read while re-laying weights out stay resident. Tensors in
    ``done`` (shared, or copied already) are left alone."""
    for tensor in [*model.parameters(), *model.buffers()]:
        _copy_out_once(tensor, done)
