"""A frozen model's linear layers on oneDNN-reordered weights, which replace the plain ones.

oneDNN multiplies a weight it reordered once into its own blocked layout faster than the plain
row-major one, which it otherwise re-blocks on every call (measured on the AMD EPYC box, SmolLM2's
shapes: a decode step's layer products at batch 32 ~20% faster, a prefill pass's a few percent; the
values equal the plain weight's products exactly from 4 rows up and to float rounding below). The
reordered tensor is an opaque ``mkldnn`` tensor of the same size, so a sampling engine that owns a
frozen model can hold the reordered copy *instead of* the plain one: the speed at no extra memory.

:func:`reorder_frozen_linears` does that to a model in place:

* every ``OneDnnLinear`` becomes a :class:`ReorderedLinear` (inference only: no parameters, no
  gradients), except weights the caller still shares with another model (a training run's frozen
  base), a weight tied to the input embedding (the embedding looks rows up in it), and the other
  members of a fusable group (below) one of whose members stays plain;
* an attention block's query, key and value projections, which read the same input, become one
  reordered product (:class:`FusedProjections`): the block calls the three modules one after the
  other with the same tensor, and the first call computes all three outputs (one product instead of
  three, as the lean decode step does); a gated MLP's gate and up projections likewise;
* the parameters left (embedding, norms) are copied out of the checkpoint file the model was
  memory-mapped from, so that the mapping, whose pages of the replaced weights were read while
  reordering, is released with them.

A model so changed is only for inference in this process: it has no state dict of the replaced
weights and cannot be trained or moved to another device.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from envsuite.engine.kernels._onednn import OneDnnLinear, onednn_fits, onednn_linear, reordered_weight


class ReorderedLinear(torch.nn.Module):
    """``x @ W.T + b`` through oneDNN on a reordered ``W`` (see module docstring); inference only."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        # Plain attributes, not parameters: an opaque mkldnn tensor has no storage to save or train.
        self.packed = reordered_weight(weight.detach())
        # The bias is copied: a view of a memory-mapped checkpoint would keep the whole mapping alive.
        self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onednn_linear(x, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, reordered"


class FusedProjections:
    """Linear layers reading the same input as one reordered product (their weights' rows stacked).

    :meth:`part` gives one module per layer; calling them one after the other on the same input tensor
    computes the product once (the first call) and returns each its columns of the output. A part
    called on another input computes the product again, so any call order gives the right values.
    """

    def __init__(self, linears: list[torch.nn.Linear]) -> None:
        weights = [linear.weight.detach() for linear in linears]
        self.sizes = [int(w.shape[0]) for w in weights]
        biases = zero_filled_biases(linears)
        self.product = ReorderedLinear(torch.cat(weights), None if biases is None else torch.cat(biases))
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None
        self._served: set[int] = set()

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


@dataclass(frozen=True)
class ReorderReport:
    """What :func:`reorder_frozen_linears` replaced."""

    reordered: int
    """Linear layers now on reordered weights (each fused projection counted)."""
    fused_blocks: int
    """Groups of layers that became one product: an attention block's query/key/value projections, a
    gated MLP's gate and up projections."""
    kept: int
    """Linear layers left as they were (shared, tied to the embedding, or not fp32 on the CPU)."""


_FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Layers a block calls one after the other on the same input: attention's query/key/value
projections, a gated MLP's gate and up projections (in the order the block calls them)."""


def reorder_frozen_linears(model: torch.nn.Module, shared: Collection[int] = ()) -> ReorderReport:
    """Replace ``model``'s oneDNN linear layers by reordered ones, in place (see module docstring).

    ``shared``: ids of weight tensors another live model also holds; their layers keep the plain weight
    (a reordered copy would not replace it, only add to it).
    """
    # An LM head tied to the input embedding stays plain: the embedding looks its rows up.
    tied = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}

    def movable(module: object) -> bool:
        return (
            isinstance(module, OneDnnLinear)
            and id(module.weight) not in shared
            and id(module.weight) not in tied
            and onednn_fits(module.weight)
        )

    fused_blocks = reordered = kept = 0
    pinned: set[int] = set()
    for block in list(model.modules()):
        for names in _FUSED_GROUPS:
            projections = [getattr(block, name, None) for name in names]
            linears = [p for p in projections if isinstance(p, torch.nn.Linear)]
            if len(linears) < len(names):
                continue
            if not all(movable(p) for p in linears) or len({p.in_features for p in linears}) != 1:
                # A group stays plain as a whole: the lean step fuses plain groups itself.
                pinned.update(id(p) for p in linears)
                continue
            fused = FusedProjections(linears)
            for index, name in enumerate(names):
                setattr(block, name, fused.part(index))
            fused_blocks += 1
            reordered += len(names)
    for name, module in list(model.named_modules()):
        if not isinstance(module, torch.nn.Linear):
            continue
        if movable(module) and id(module) not in pinned:
            model.set_submodule(name, ReorderedLinear(module.weight, module.bias))
            reordered += 1
        else:
            kept += 1
    if reordered:
        _copy_out_of_file_mappings(model, shared)
    return ReorderReport(reordered=reordered, fused_blocks=fused_blocks, kept=kept)


def zero_filled_biases(linears: Sequence[torch.nn.Linear]) -> list[torch.Tensor] | None:
    """The biases of linear layers to be fused into one product, zeros for a layer without one; None
    when no layer has a bias (the fused product then has none either)."""
    if all(linear.bias is None for linear in linears):
        return None
    return [
        linear.weight.new_zeros(linear.out_features) if linear.bias is None else linear.bias.detach()
        for linear in linears
    ]


def _copy_out_of_file_mappings(model: torch.nn.Module, shared: Collection[int]) -> None:
    """Give the model's remaining parameters and buffers memory of their own (see module docstring).

    transformers loads safetensors checkpoints as views of one memory-mapped file; the mapping lives
    while any view does, and its pages read while reordering stay resident. Shared tensors are left
    alone (the other model holds the same mapping anyway)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) not in shared and tensor.device.type == "cpu" and not tensor.is_mkldnn:
                tensor.data = tensor.data.clone()
