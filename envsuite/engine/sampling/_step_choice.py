"""Choosing how the decode step runs, per row bucket, by timing the whole step on this machine.

The product calibration (``envsuite.engine.kernels``) times each product shape alone; the step's own
choices were fixed: the captured step (one native call) over the step layer by layer, the team of
threads wherever every product is on panels, and envsuite's native products over torch's. Measured on
a Zen 3 box (issue 51), that fixed default was 1.40x slower than oneDNN's reordered weights at 16 rows
and slower than torch's products at one row. Here every way the step can run is a :class:`StepWay`
(a :class:`Products` setting, which fixes the weights' layouts, and a :class:`StepMode`), and
``_step_timing`` times each on the model's own weights at each row bucket the engine can reach
(``EngineConfig.max_batch_size``), steps of the real model, the same sampling as the engine's.

A model holds one layout per weight, so the choice is made as the product calibration makes it
(``choose``): for each products setting, the fastest of its modes at each row bucket; then the setting
whose worst bucket is closest to the fastest way overall (ties: the least total time). Where one
setting holds the fastest way at every bucket, the step is never slower than the best way measured;
otherwise :attr:`StepChoice.worst_ratio` says by how much it can be (``envsuite doctor`` prints each
way's time per bucket and the choice).

The timings are cached beside the product calibration, per machine key (``MachineKey``: the CPU, the
libraries, the native kernels' source and instruction set, the thread count) and model shape, per row
bucket: a bucket measured once is never measured again on that machine; a larger batch measures only
its new buckets.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsuite.engine.kernels import ROW_BUCKETS, MachineKey, bucket_index

STEP_CHOICE_ENV = "ENVSUITE_STEP_CHOICE"
TORCH_PRODUCTS = ("f-linear", "onednn", "onednn-reordered")


class Products(enum.StrEnum):
    """Which kernels a step's products run on (each setting lays the weights out its own way)."""

    CALIBRATED = "calibrated"
    """The product calibration's choice among every usable path, native kernels included (the default)."""
    TORCH_PRODUCTS = "torch-products"
    """The product calibration's choice among torch's products; the step's norms, attention and
    sampling through envsuite's native kernels."""
    TORCH = "torch"
    """The product calibration's choice among torch's products; the rest of the step through torch's."""
    REORDERED = "reordered"
    """oneDNN on reordered weights everywhere; the rest of the step through torch's."""

    @property
    def native(self) -> bool:
        """Whether the step's norms, attention and sampling run envsuite's native kernels."""
        return self in (Products.CALIBRATED, Products.TORCH_PRODUCTS)

    @property
    def among(self) -> tuple[str, ...] | None:
        """The product paths the calibration chooses among (``EngineConfig.product_paths``)."""
        return None if self is Products.CALIBRATED else TORCH_PRODUCTS

    @property
    def path(self) -> str | None:
        """The one product path forced everywhere (``EngineConfig.product_path``), if any."""
        return "onednn-reordered" if self is Products.REORDERED else None


class StepMode(enum.StrEnum):
    """How a step runs its layers."""

    TEAM = "team"
    """One native call, one team of threads for the whole step (every product on envsuite's panels)."""
    CAPTURED = "captured"
    """One native call, each kernel its own op (``decode_layers`` by op)."""
    LAYERS = "layers"
    """Layer by layer from Python, one operation at a time."""


@dataclass(frozen=True)
class StepWay:
    """One way to run the decode step: its products and its mode."""

    products: Products
    mode: StepMode

    @property
    def name(self) -> str:
        return f"{self.products.value}/{self.mode.value}"

    @classmethod
    def parse(cls, name: str) -> StepWay:
        products, mode = name.split("/")
        return cls(Products(products), StepMode(mode))


STEP_WAYS = (
    StepWay(Products.CALIBRATED, StepMode.TEAM),
    StepWay(Products.CALIBRATED, StepMode.CAPTURED),
    StepWay(Products.CALIBRATED, StepMode.LAYERS),
    StepWay(Products.TORCH_PRODUCTS, StepMode.CAPTURED),
    StepWay(Products.TORCH_PRODUCTS, StepMode.LAYERS),
    StepWay(Products.TORCH, StepMode.LAYERS),
    StepWay(Products.REORDERED, StepMode.LAYERS),
)
"""Every way measured (a mode a setting cannot run, such as the team where not every product is on
panels, is left out where it cannot)."""

DEFAULT_WAY = STEP_WAYS[0]
"""What the step ran before it was measured (the team where it fits, else the captured step by op)."""


def decode_buckets(max_rows: int) -> tuple[int, ...]:
    """The row buckets a decode step of at most ``max_rows`` rows can fall in."""
    return ROW_BUCKETS[: bucket_index(max(1, max_rows)) + 1]


@dataclass(frozen=True)
class StepChoice:
    """The measured step times per row bucket and way, and what was chosen (module docstring)."""

    ms: Mapping[int, Mapping[StepWay, float]]
    """Per row bucket measured, per way measured there, ms per step (the least of its timed steps)."""
    products: Products
    modes: Mapping[int, StepMode]
    """Per row bucket measured, the mode run (with :attr:`products`)."""
    worst_ratio: float
    """The largest ratio, over the buckets, of the chosen way's time to the fastest way's (1.0: the
    fastest way at every bucket)."""
    measured_now: tuple[int, ...] = ()
    """The buckets measured by this process (the others were read from the cache)."""
    seconds: float = 0.0
    """What measuring them took."""
    cache_file: Path | None = None

    def way(self, rows: int) -> StepWay:
        """The way a step of ``rows`` rows runs."""
        return StepWay(self.products, self.modes[ROW_BUCKETS[bucket_index(rows)]])

    def best(self, bucket: int) -> StepWay:
        """The fastest way measured at ``bucket``."""
        times = self.ms[bucket]
        return min(times, key=lambda way: times[way])

    def report(self) -> list[str]:
        """Each way's time per bucket, and the choice (``envsuite doctor``)."""
        ways = [way for way in STEP_WAYS if any(way in times for times in self.ms.values())]
        head = f"decode step chosen by timing the whole step: products {self.products.value}"
        if self.worst_ratio <= 1.0:
            head += "; the fastest way measured at every row bucket"
        else:
            head += f"; at worst {self.worst_ratio:.2f}x the fastest way (another products setting)"
        if self.cache_file is not None:
            buckets = ", ".join(str(b) for b in self.measured_now) or "none"
            head += f"\n  ({self.cache_file}; buckets measured now: {buckets}, {self.seconds:.1f} s)"
        lines = [head, "    rows  " + "  ".join(f"{w.name:>24s}" for w in ways) + "  -> chosen (ms per step)"]
        for bucket, times in sorted(self.ms.items()):
            cells = "  ".join(f"{times[w]:24.2f}" if w in times else f"{'-':>24s}" for w in ways)
            lines.append(f"    {bucket:4d}  {cells}  -> {self.way(bucket).name}")
        return lines


def choose_step(ms: Mapping[int, Mapping[StepWay, float]]) -> tuple[Products, dict[int, StepMode], float]:
    """The products setting, the mode per bucket and the worst ratio for ``ms`` (module docstring)."""
    buckets = sorted(ms)
    best = {b: min(ms[b].values()) for b in buckets}
    options = []
    for products in Products:
        modes: dict[int, StepMode] = {}
        total, ratio = 0.0, 1.0
        for b in buckets:
            own = {way.mode: t for way, t in ms[b].items() if way.products is products}
            if not own:
                break
            modes[b] = min(own, key=lambda mode, own=own: own[mode])  # type: ignore[misc]
            total += own[modes[b]]
            ratio = max(ratio, own[modes[b]] / max(best[b], 1e-9))
        else:
            options.append((ratio, total, products, modes))
    if not options:
        raise ValueError("no products setting was measured at every row bucket")
    ratio, _, products, modes = min(options, key=lambda option: (option[0], option[1]))
    return products, modes, ratio


def step_choice_wanted() -> bool:
    """``$ENVSUITE_STEP_CHOICE``: ``measure`` (the default) times the step's ways; ``fixed`` keeps the
    fixed default (:data:`DEFAULT_WAY`) without measuring."""
    value = os.environ.get(STEP_CHOICE_ENV, "").strip().lower() or "measure"
    if value not in ("measure", "fixed"):
        raise ValueError(f"${STEP_CHOICE_ENV}={value!r}: choose measure or fixed")
    return value == "measure"


def model_signature(config: Any) -> str:
    """What of a model's shape the step's times depend on (its weights' values do not matter)."""
    parts = (
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.intermediate_size,
        config.vocab_size,
        int(bool(getattr(config, "tie_word_embeddings", False))),
    )
    return "llama-" + "x".join(str(int(p)) for p in parts)


def step_cache_file(directory: Path, key: MachineKey | None = None) -> Path:
    """The file in ``directory`` holding the step timings measured on ``key`` (default: this machine's)."""
    return directory / f"steps-{(key or MachineKey.here()).digest}.json"


def load_step_times(file: Path, signature: str) -> dict[int, dict[StepWay, float]]:
    """The cached step times of the model of ``signature`` (empty where none or unreadable)."""
    try:
        entry = json.loads(file.read_text())["models"][signature]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    times: dict[int, dict[StepWay, float]] = {}
    for bucket, ways in entry.items():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            times[int(bucket)] = {StepWay.parse(name): float(ms) for name, ms in ways.items()}
    return {b: t for b, t in times.items() if b in ROW_BUCKETS and t}


def save_step_times(file: Path, signature: str, times: Mapping[int, Mapping[StepWay, float]]) -> None:
    """Merge ``times`` into ``file`` (replaced whole: a reader sees the old file or the new one)."""
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        data = {}
    models = data.setdefault("models", {})
    entry = models.setdefault(signature, {})
    for bucket, ways in times.items():
        entry[str(bucket)] = {way.name: ms for way, ms in ways.items()}
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    partial.replace(file)


def fixed_modes(buckets: Sequence[int]) -> dict[int, StepMode]:
    """The fixed default's modes (:data:`DEFAULT_WAY`) at ``buckets``."""
    return {b: DEFAULT_WAY.mode for b in buckets}
