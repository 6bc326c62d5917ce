"""Linear layers through oneDNN: the local backend's matrix products (sampling and training alike).

torch's CPU builds run ``F.linear`` on MKL's sgemm. On the AMD EPYC boxes this project runs on, MKL
reached about 200 GFLOP/s in fp32 where oneDNN (also shipped in torch) reached about 450, at every
shape the backend multiplies: the 1-64 rows of a decode step and the thousands of a prefill pass or a
training batch (docs/benchmarks.md, Decoding and Training step). ``mkldnn::_linear_pointwise`` is the op torch's own compiler emits for
a linear layer on CPU; it reads the weight as it is, so nothing is copied. Its values equal
``F.linear``'s up to float rounding (tested for 1 to 300 rows, with and without a bias).

The op has no autograd formula of its own: :class:`OneDnnLinear` gives it one (the input's gradient
is the same op on the transposed weight, read in place; a weight's gradient is a plain matrix
product), so a trained model can route its layers through it too.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F


def onednn_available() -> bool:
    """True where torch has oneDNN's linear ops (its x86 and aarch64 builds)."""
    mkldnn = torch.ops.mkldnn
    return (
        bool(torch.backends.mkldnn.is_available())
        and hasattr(mkldnn, "_linear_pointwise")
        and hasattr(mkldnn, "_reorder_linear_weight")
    )


def onednn_fits(*tensors: torch.Tensor) -> bool:
    """Whether oneDNN's linear op takes these tensors: fp32 on the CPU (anything else keeps ``F.linear``)."""
    return all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` through oneDNN; ``weight`` is a plain tensor or :func:`reordered_weight`'s."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return out


REORDER_ROWS = 32
"""The nominal batch oneDNN reorders weights for (any row count then uses them)."""


def reordered_weight(weight: torch.Tensor) -> torch.Tensor:
    """A copy of ``weight`` in oneDNN's blocked layout (an opaque ``mkldnn`` tensor, about the same size),
    which :func:`onednn_linear` multiplies a little faster than the plain weight."""
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(weight, REORDER_ROWS)
    return packed


class _LinearContext(Protocol):
    """What :class:`_OneDnnLinearFunction` keeps on autograd's context object between its passes."""

    has_bias: bool
    needs_input_grad: tuple[bool, ...]

    @property
    def saved_tensors(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The input (None when the weight needs no gradient) and the weight."""
        ...

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None: ...


class _OneDnnLinearFunction(torch.autograd.Function):
    """:func:`onednn_linear` with its gradients (only those asked for)."""

    @staticmethod
    def forward(
        ctx: _LinearContext, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        # The input is kept only when the weight's gradient will need it (frozen LoRA bases: never).
        ctx.save_for_backward(x if weight.requires_grad else None, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x, weight, bias)

    @staticmethod
    def backward(
        ctx: _LinearContext, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # dL/dx = g @ W: oneDNN's product with the transposed view of W (strided, no copy).
            grad_x = onednn_linear(grad_out.contiguous(), weight.t(), None)
        rows_g = grad_out.reshape(-1, grad_out.shape[-1])
        if ctx.needs_input_grad[1]:
            assert x is not None  # saved whenever the weight needs a gradient
            grad_weight = rows_g.t() @ x.reshape(-1, x.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows_g.sum(0)
        return grad_x, grad_weight, grad_bias


class OneDnnLinear(torch.nn.Linear):
    """A ``torch.nn.Linear`` whose forward is :func:`onednn_linear` (with gradients): the same parameters
    (shared with the layer it replaced), the same state dict."""

    @classmethod
    def replacing(cls, linear: torch.nn.Linear) -> OneDnnLinear:
        # Built without nn.Linear.__init__, which would allocate and initialise a fresh weight.
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight = linear.weight
        layer.bias = linear.bias
        layer.train(linear.training)
        return layer

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not onednn_fits(input, self.weight):
            return F.linear(input, self.weight, self.bias)
        if torch.is_grad_enabled() and (input.requires_grad or self.weight.requires_grad):
            out: torch.Tensor = _OneDnnLinearFunction.apply(input, self.weight, self.bias)
            return out
        return onednn_linear(input, self.weight, self.bias)


def route_linears_through_onednn(model: torch.nn.Module) -> int:
    """Replace every plain ``torch.nn.Linear`` in ``model`` by a :class:`OneDnnLinear` over the same
    parameters; returns how many were replaced (0 where torch has no oneDNN)."""
    if not onednn_available():
        return 0
    plain = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear  # subclasses (LoRA layers, quantized ones) keep their own
    ]
    for name, module in plain:
        model.set_submodule(name, OneDnnLinear.replacing(module))
    return len(plain)
