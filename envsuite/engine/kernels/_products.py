"""A frozen linear layer's product, ``x @ W.T + b``, on the weight layout and kernels chosen for it.

Which kernel multiplies fastest depends on the CPU, the library versions and the shape: on the AMD EPYC
box oneDNN on reordered weights beat MKL's ``F.linear`` by 2x at 32 rows, while on an Intel Xeon box
plain ``F.linear`` was the faster one for one row (docs/benchmarks.md). So a :class:`Product` holds its
weight in one :class:`Layout` and names a :class:`ProductPath` per row count (:data:`ROW_BUCKETS`),
chosen by measurement on the machine (``_calibration``); calling it runs the path chosen for the
input's row count.

Paths, each with the layout it reads:

* ``f-linear``: torch's ``F.linear`` on the plain ``(N, K)`` weight (MKL's sgemm in torch's x86 builds);
* ``onednn``: oneDNN's linear op on the plain weight (``_onednn``);
* ``onednn-reordered``: oneDNN on its own blocked copy of the weight, which replaces the plain one;
* ``rows``: envsuite's native kernel on the plain weight, each weight row read once for every input
  row (a decode step's 1-8 rows: a stream over the weights at memory speed);
* ``panels``: envsuite's native kernel on the weight laid out in panels of 16 output columns
  (``(ceil(N / 16), K, 16)``), which serves any row count from one layout.

Every path computes the same values up to float rounding (tested for 1 to 300 rows).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from envsuite.engine.kernels._onednn import onednn_available, onednn_fits, onednn_linear, reordered_weight

ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 256)
"""Row counts calibrated; an input uses the choice of the smallest bucket at least its row count (the
last for anything larger: a prefill pass)."""

_MAX_ROWS = ROW_BUCKETS[-1]
_BUCKET_OF_ROWS = tuple(bisect.bisect_left(ROW_BUCKETS, rows) for rows in range(_MAX_ROWS + 1))


def bucket_index(rows: int) -> int:
    """The index in :data:`ROW_BUCKETS` whose choice an input of ``rows`` rows uses."""
    return _BUCKET_OF_ROWS[rows] if rows <= _MAX_ROWS else len(ROW_BUCKETS) - 1


class Layout(enum.StrEnum):
    """How a product's weight is held."""

    PLAIN = "plain"
    """The model's own ``(N, K)`` row-major tensor."""
    ONEDNN_REORDERED = "onednn-reordered"
    """oneDNN's blocked layout (an opaque ``mkldnn`` tensor of about the same size)."""
    PANELS = "panels"
    """envsuite's panels: ``(ceil(N / 16), K, 16)``, 16 output columns interleaved by ``k``."""


class ProductPath(enum.StrEnum):
    """A kernel for ``x @ W.T + b`` (see module docstring)."""

    F_LINEAR = "f-linear"
    ONEDNN = "onednn"
    ONEDNN_REORDERED = "onednn-reordered"
    ROWS = "rows"
    PANELS = "panels"

    @property
    def layout(self) -> Layout:
        return _LAYOUT_OF[self]

    @property
    def native(self) -> bool:
        """Whether the path is one of envsuite's native kernels (``_native``)."""
        return self in (ProductPath.ROWS, ProductPath.PANELS)


_LAYOUT_OF = {
    ProductPath.F_LINEAR: Layout.PLAIN,
    ProductPath.ONEDNN: Layout.PLAIN,
    ProductPath.ONEDNN_REORDERED: Layout.ONEDNN_REORDERED,
    ProductPath.ROWS: Layout.PLAIN,
    ProductPath.PANELS: Layout.PANELS,
}

PATH_NAMES = {
    ProductPath.F_LINEAR: "F.linear (torch's default; MKL on x86 builds)",
    ProductPath.ONEDNN: "oneDNN, plain weight",
    ProductPath.ONEDNN_REORDERED: "oneDNN, reordered weight",
    ProductPath.ROWS: "envsuite rows kernel (native), plain weight",
    ProductPath.PANELS: "envsuite panels kernel (native), panel layout",
}
"""How reports name each path."""


def usable_paths(
    weight: torch.Tensor, *, onednn: bool = True, relayout: bool = True, native: bool = True
) -> tuple[ProductPath, ...]:
    """The paths that can multiply ``weight`` (a plain fp32 CPU tensor for all but ``f-linear``):
    ``onednn`` allows oneDNN's (where torch has it), ``relayout`` the layouts that replace the plain
    weight, ``native`` envsuite's kernels (the caller checks that they are loaded)."""
    paths = [ProductPath.F_LINEAR]
    if not onednn_fits(weight):
        return tuple(paths)
    if onednn and onednn_available():
        paths.append(ProductPath.ONEDNN)
        if relayout:
            paths.append(ProductPath.ONEDNN_REORDERED)
    if native:
        paths.append(ProductPath.ROWS)
        if relayout:
            paths.append(ProductPath.PANELS)
    return tuple(paths)


def lay_out(weight: torch.Tensor, layout: Layout) -> torch.Tensor:
    """``weight`` (plain) in ``layout``: the same tensor for the plain layout, else a new one."""
    if layout is Layout.PLAIN:
        return weight
    if layout is Layout.ONEDNN_REORDERED:
        return reordered_weight(weight.detach().contiguous())
    packed: torch.Tensor = torch.ops.envsuite.pack_panels(weight.detach().contiguous())
    return packed


def run_path(
    path: ProductPath, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """``x @ W.T + bias`` through ``path``, ``weight`` being ``W`` in that path's layout."""
    if path is ProductPath.F_LINEAR:
        return F.linear(x, weight, bias)
    if path is ProductPath.ONEDNN or path is ProductPath.ONEDNN_REORDERED:
        return onednn_linear(x, weight, bias)
    if path is ProductPath.ROWS:
        out: torch.Tensor = torch.ops.envsuite.rows_linear(x, weight, bias)
        return out
    out = torch.ops.envsuite.panel_linear(x, weight, out_features, bias)
    return out


Runner = Callable[[torch.Tensor], torch.Tensor]


class Product:
    """One linear layer's product on its weight in one layout, with a path per row bucket.

    ``paths[i]`` multiplies inputs of up to ``ROW_BUCKETS[i]`` rows (all of them read ``layout``).
    """

    __slots__ = ("_runners", "bias", "in_features", "layout", "out_features", "paths", "weight")

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        in_features: int,
        out_features: int,
        paths: Sequence[ProductPath],
    ) -> None:
        if len(paths) != len(ROW_BUCKETS):
            raise ValueError(f"one path per row bucket ({len(ROW_BUCKETS)}), got {len(paths)}")
        layouts = {path.layout for path in paths}
        if len(layouts) != 1:
            raise ValueError(f"the paths {sorted(paths)} read different weight layouts")
        self.weight, self.bias = weight, bias
        self.in_features, self.out_features = in_features, out_features
        self.paths = tuple(paths)
        self.layout = layouts.pop()
        self._runners = tuple(self._runner(path) for path in self.paths)

    @classmethod
    def of_plain(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, paths: Sequence[ProductPath]
    ) -> Product:
        """The product of a plain ``(N, K)`` weight, laid out as ``paths`` need (a new tensor unless plain)."""
        layout = paths[0].layout
        return cls(lay_out(weight, layout), bias, int(weight.shape[1]), int(weight.shape[0]), paths)

    @classmethod
    def everywhere(cls, weight: torch.Tensor, bias: torch.Tensor | None, path: ProductPath) -> Product:
        """The product of a plain weight through ``path`` at every row count."""
        return cls.of_plain(weight, bias, [path] * len(ROW_BUCKETS))

    def _runner(self, path: ProductPath) -> Runner:
        weight, bias, out_features = self.weight, self.bias, self.out_features
        if path is ProductPath.F_LINEAR:
            return lambda x: F.linear(x, weight, bias)
        if path is ProductPath.ONEDNN or path is ProductPath.ONEDNN_REORDERED:
            return lambda x: onednn_linear(x, weight, bias)
        return lambda x: run_path(path, x, weight, bias, out_features)

    def path_for(self, rows: int) -> ProductPath:
        """The path an input of ``rows`` rows runs through."""
        return self.paths[bucket_index(rows)]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features if self.in_features else 0
        return self._runners[bucket_index(rows)](x)

    def __repr__(self) -> str:
        paths = ", ".join(f"{rows}:{path.value}" for rows, path in zip(ROW_BUCKETS, self.paths, strict=True))
        return f"Product({self.in_features}->{self.out_features}, {self.layout.value}, {paths})"


class FrozenLinear(torch.nn.Module):
    """A frozen linear layer that runs a :class:`Product` (inference only: no parameters, no gradients).

    The product holds the weight in the layout chosen for it; the layer that was replaced is gone, so a
    re-laid-out weight takes the plain one's place (the same memory)."""

    def __init__(self, product: Product) -> None:
        super().__init__()
        self.product = product
        self.in_features, self.out_features = product.in_features, product.out_features

    @property
    def bias(self) -> torch.Tensor | None:
        return self.product.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, {self.product.layout.value}"
        )
