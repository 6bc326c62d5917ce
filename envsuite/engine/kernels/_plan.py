"""A :class:`KernelPlan`: which layout and kernels each of a frozen model's products uses, and why.

The plan is built once per sampling engine (``EngineConfig``): :meth:`KernelPlan.measured` finds the
model's products (:func:`product_sites`: each linear layer, or a fusable group of them as one product),
gets their shapes' timings from the calibration cache (measuring what is missing, ``_calibration``), and
then answers :meth:`KernelPlan.choice` per shape. :meth:`KernelPlan.forced` runs one path everywhere
(tests and benchmarks compare the paths that way). :meth:`KernelPlan.report` says what was picked and
why (``envsuite doctor``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import torch

from envsuite.engine.kernels._calibration import (
    MIN_SAMPLE_BYTES,
    CalibrationResult,
    Choice,
    MachineKey,
    Shape,
    ShapeTiming,
    calibrated_timings,
    choose,
    forced_choice,
    last_level_cache_bytes,
)
from envsuite.engine.kernels._onednn import onednn_fits
from envsuite.engine.kernels._preparation import Preparation
from envsuite.engine.kernels._products import PATH_NAMES, ROW_BUCKETS, Layout, ProductPath

FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Layers a block calls one after the other on the same input: attention's query/key/value
projections, a gated MLP's gate and up projections (in the order the block calls them)."""


class WeightUse(enum.StrEnum):
    """What else reads a product's weight, which bounds the layouts it may take."""

    OWNED = "owned"
    """Only the product: any layout (the re-laid-out weight replaces the plain one)."""
    EMBEDDED = "embedded"
    """Also the input embedding, which looks rows up in it (a tied LM head): a layout rows can be read
    from (plain, or panels: the embedding then reads its rows there, ``PanelEmbedding``)."""
    SHARED = "shared"
    """Also another live model (a training run's frozen base), or a fusable group partner of such a
    weight: plain, where it is (a copy in another layout would only add memory)."""

    def allows(self, layout: Layout) -> bool:
        if self is WeightUse.OWNED:
            return True
        return layout is Layout.PLAIN or (self is WeightUse.EMBEDDED and layout is Layout.PANELS)


@dataclass(frozen=True)
class ProductSite:
    """One product of a frozen model: a linear layer, or a fusable group of them (their rows stacked)."""

    block: torch.nn.Module
    """The module holding the layers (as attributes ``names``)."""
    names: tuple[str, ...]
    linears: tuple[torch.nn.Linear, ...]
    use: WeightUse

    @property
    def shape(self) -> Shape:
        return int(self.linears[0].in_features), sum(int(linear.out_features) for linear in self.linears)

    def plain_weight(self) -> torch.Tensor:
        """The product's plain weight (a stacked copy for a group)."""
        weights = [linear.weight.detach() for linear in self.linears]
        return weights[0] if len(weights) == 1 else torch.cat(weights)


def _is_linear(module: object) -> TypeGuard[torch.nn.Linear]:
    return isinstance(module, torch.nn.Linear) and onednn_fits(module.weight)


def product_sites(model: torch.nn.Module, shared: Collection[int] = ()) -> list[ProductSite]:
    """``model``'s fp32 CPU linear layers as products (see :class:`ProductSite`), fusable groups as one.

    A group with a member that must stay plain (``shared`` ids, or tied to an input embedding) is not
    fused: each member is a product of its own, on its plain weight. A layer whose weight an input
    embedding also holds (a tied LM head) is :attr:`WeightUse.EMBEDDED`.
    """
    tied = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    fixed = set(shared) | tied
    sites: list[ProductSite] = []
    taken: set[int] = set()
    pinned: set[int] = set()
    for block in model.modules():
        for names in FUSED_GROUPS:
            linears = tuple(getattr(block, name, None) for name in names)
            if not all(_is_linear(linear) for linear in linears):
                continue
            members: tuple[torch.nn.Linear, ...] = linears  # type: ignore[assignment]
            if any(id(m.weight) in fixed for m in members) or len({m.in_features for m in members}) != 1:
                pinned.update(id(m) for m in members)
                continue
            sites.append(ProductSite(block, names, members, WeightUse.OWNED))
            taken.update(id(m) for m in members)
    for name, module in list(model.named_modules()):
        if id(module) in taken or not _is_linear(module) or not name:
            continue
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if id(module.weight) in shared or id(module) in pinned:
            use = WeightUse.SHARED
        else:
            use = WeightUse.EMBEDDED if id(module.weight) in tied else WeightUse.OWNED
        sites.append(ProductSite(parent, (attribute,), (module,), use))
    return sites


def sample_sites(sites: Sequence[ProductSite], shape: Shape) -> list[ProductSite]:
    """The first of ``sites`` of ``shape`` whose weights are enough for a timed pass from memory
    (``_calibration``)."""
    wanted = max(MIN_SAMPLE_BYTES, 2 * last_level_cache_bytes())
    chosen: list[ProductSite] = []
    held = 0
    for site in sites:
        if site.shape != shape or held >= wanted:
            continue
        chosen.append(site)
        held += 4 * shape[0] * shape[1]  # fp32 (onednn_fits)
    return chosen


def weights_of(sites: Sequence[ProductSite], shape: Shape) -> list[torch.Tensor]:
    """The plain weights of :func:`sample_sites` (a stacked copy for a group)."""
    return [site.plain_weight().contiguous() for site in sample_sites(sites, shape)]


_PLAIN_STAND_IN = {
    ProductPath.ONEDNN_REORDERED: ProductPath.ONEDNN,
    ProductPath.PANELS: ProductPath.ROWS,
}
"""Where a forced path's layout cannot be used (a weight that stays plain), the plain path in its place."""


def _allowed_layout(path: ProductPath, use: WeightUse) -> ProductPath:
    """``path``, or its plain stand-in where ``use`` forbids its layout."""
    return path if use.allows(path.layout) else _PLAIN_STAND_IN[path]


@dataclass(frozen=True)
class KernelPlan:
    """The paths a model's products may take and how each shape's were chosen (module docstring)."""

    paths: tuple[ProductPath, ...]
    """The paths chosen among (usable here, allowed by the engine's configuration)."""
    timings: Mapping[Shape, ShapeTiming] = field(default_factory=dict)
    forced_path: ProductPath | None = None
    calibration: CalibrationResult | None = None
    native: str = ""
    """Whether envsuite's native kernels are loaded here, and how (or why not)."""
    chosen: dict[tuple[Shape, WeightUse], Choice] = field(default_factory=dict, compare=False)
    """Every choice made so far, by shape and weight use (for the report)."""
    native_loaded: bool = False
    """Whether the native kernels are loaded for the engine of this plan (its lean step may use them)."""
    preparation: Preparation | None = field(default=None, compare=False)
    """On a first-use plan (``_first_use``): the build and calibration running in the background, for
    the engines made after it."""

    @classmethod
    def forced(cls, path: ProductPath, native: str = "", native_loaded: bool = False) -> KernelPlan:
        """Every product through ``path`` (a weight that cannot take its layout: its plain counterpart)."""
        return cls(paths=(path,), forced_path=path, native=native, native_loaded=native_loaded)

    @classmethod
    def measured(
        cls,
        model: torch.nn.Module,
        paths: Sequence[ProductPath],
        cache: Path,
        shared: Collection[int] = (),
        native: str = "",
        native_loaded: bool = False,
    ) -> KernelPlan:
        """Timings of ``paths`` for every product shape of ``model`` (cached ones read, the rest measured)."""
        sites = product_sites(model, shared)
        shapes = [site.shape for site in sites]
        result = calibrated_timings(shapes, functools.partial(weights_of, sites), paths, cache)
        return cls(
            paths=tuple(paths),
            timings=result.timings,
            calibration=result,
            native=native,
            native_loaded=native_loaded,
        )

    def choice(self, shape: Shape, use: WeightUse = WeightUse.OWNED) -> Choice:
        """The layout and per-row paths for a product of ``shape`` whose weight is ``use``'d so."""
        key = (shape, use)
        if key not in self.chosen:
            self.chosen[key] = self._choose(shape, use)
        return self.chosen[key]

    def _choose(self, shape: Shape, use: WeightUse) -> Choice:
        if self.forced_path is not None:
            return forced_choice(shape, _allowed_layout(self.forced_path, use))
        allowed = [p for p in self.paths if use.allows(p.layout)]
        timing = self.timings.get(shape)
        if timing is None or not any(p in timing.ms for p in allowed):
            return forced_choice(shape, allowed[0] if allowed else ProductPath.F_LINEAR)
        return choose(timing, allowed)

    def report(self) -> str:
        """What was picked for each product shape, and why (times per row count)."""
        key = MachineKey.here()
        lines = [
            f"CPU: {key.cpu}; torch {key.versions['torch']}, MKL {key.versions['mkl']}, "
            f"oneDNN {key.versions['onednn']}; {key.threads} threads",
            f"native kernels: {self.native or 'not asked for'}",
        ]
        if self.preparation is not None:
            lines.append(f"first use on this machine: {self.preparation.describe()}")
        if self.forced_path is not None:
            lines.append(f"forced: every product through {PATH_NAMES[self.forced_path]}")
        elif self.calibration is not None:
            result = self.calibration
            lines.append(
                f"calibration: {result.cache_file} ({result.measured_shapes} shapes measured now in "
                f"{result.seconds:.1f} s, the rest cached)"
            )
        lines.append("paths considered: " + ", ".join(f"{p.value} ({PATH_NAMES[p]})" for p in self.paths))
        for (shape, use), choice in sorted(self.chosen.items()):
            lines.extend(self._describe(shape, use, choice))
        return "\n".join(lines)

    def _describe(self, shape: Shape, use: WeightUse, choice: Choice) -> list[str]:
        kind = {
            WeightUse.OWNED: "",
            WeightUse.EMBEDDED: " (tied to the input embedding: plain or panel layouts only)",
            WeightUse.SHARED: " (weight shared: plain-weight paths only)",
        }[use]
        head = f"product {shape[0]} -> {shape[1]}{kind}: {choice.layout.value} layout"
        timing = self.timings.get(shape)
        if not choice.measured or timing is None:
            return [head + " (not measured)"]
        if choice.worst_ratio <= 1.0:
            head += "; the fastest path measured at every row count"
        else:
            worst = max(
                range(len(ROW_BUCKETS)),
                key=lambda b: choice.ms[b] / max(timing.ms[choice.best[b]][b], 1e-9),
            )
            head += (
                f"; at worst {choice.worst_ratio:.2f}x the fastest path ({ROW_BUCKETS[worst]} rows: "
                f"{choice.best[worst].value}, another layout), the least loss of any one layout"
            )
        lines = [
            head,
            "    rows  " + "  ".join(f"{p.value:>16s}" for p in timing.ms) + "  -> chosen (us per product)",
        ]
        for index, rows in enumerate(ROW_BUCKETS):
            cells = "  ".join(f"{1000 * timing.ms[p][index]:16.1f}" for p in timing.ms)
            lines.append(f"    {rows:4d}  {cells}  -> {choice.paths[index].value}")
        return lines
