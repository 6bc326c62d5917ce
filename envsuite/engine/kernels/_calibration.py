"""Choosing each product's kernel by measuring them on this machine, once, and remembering the result.

:func:`calibrate` times every usable :class:`ProductPath` on a model's own weights, for each distinct
product shape ``(in_features, out_features)`` and each row count of :data:`ROW_BUCKETS`. A pass
multiplies enough distinct weights of the shape (at least twice the last-level cache) that they come
from memory as in a real step, not from a cache; the paths alternate within each repeat so that they
share any noise, and the median of the repeats is kept. The timings are cached in a JSON file per
machine key (:class:`MachineKey`: the CPU, torch, MKL and oneDNN versions, the native kernels' source,
torch's thread count), in ``EngineConfig.kernel_cache``, else ``$ENVSUITE_KERNEL_CACHE``, else
``<envsuite cache>/kernels``; a shape measured once is never measured again on that machine.

:func:`choose` turns one shape's timings into a :class:`Choice`. A weight is held in one layout (a
re-laid-out copy replaces the plain weight; keeping two would double the memory), so the choice is
made in two steps: for each layout, the fastest of its paths at each row count; then the layout whose
worst row count is closest to the fastest path overall (the smallest worst-case ratio; ties: the least
total time). Where one layout holds the fastest path at every row count the product is never slower
than the best path measured; otherwise the report says by how much it can be (``worst_ratio``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from envsuite.engine._background import stop_point
from envsuite.engine._host import cpu_identity
from envsuite.engine.kernels._native import instruction_set, source_digest
from envsuite.engine.kernels._products import ROW_BUCKETS, Layout, ProductPath, lay_out, run_path

logger = logging.getLogger(__name__)

CACHE_ENV = "ENVSUITE_KERNEL_CACHE"
MIN_SAMPLE_BYTES = 64 << 20
"""A timed pass reads at least this many bytes of weights (and twice the last-level cache)..."""
MIN_SAMPLE_FLOPS = 2e8
"""...or does this much arithmetic, whichever comes first (large row counts are compute-bound)."""
MIN_REPEAT_S = 2e-3
"""A timed repeat lasts at least this long (small products loop), so timer and scheduler noise stay small."""
TARGET_MEASUREMENT_S = 0.1
"""Repeats per row count: enough for about this long, within :data:`MIN_REPEATS`..:data:`MAX_REPEATS`."""
MIN_REPEATS, MAX_REPEATS = 5, 15

Shape = tuple[int, int]
"""A product's ``(in_features, out_features)``."""


def cache_directory(override: str | None = None) -> Path:
    """Where calibrations are cached: ``override``, ``$ENVSUITE_KERNEL_CACHE`` or ``<envsuite cache>/kernels``."""
    if override:
        return Path(override).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    from envsuite.models import cache_dir

    return cache_dir() / "kernels"


def _library_versions() -> dict[str, str]:
    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version (\S+)", config)
    onednn = re.search(r"MKL-DNN v([0-9.]+)", config)
    return {
        "torch": torch.__version__,
        "mkl": mkl.group(1) if mkl else "none",
        "onednn": onednn.group(1) if onednn else "none",
    }


@dataclass(frozen=True)
class MachineKey:
    """What the timings depend on besides the shapes: a calibration is reused only on the same key."""

    cpu: str
    cpu_id: str
    versions: dict[str, str]
    threads: int
    native_source: str

    @classmethod
    def here(cls) -> MachineKey:
        cpu = cpu_identity()
        return cls(
            cpu=cpu.describe(),
            cpu_id=repr(cpu),
            versions=_library_versions(),
            threads=torch.get_num_threads(),
            # the same sources built for another instruction set are other kernels, with other timings
            native_source=f"{source_digest()[:12]}/{instruction_set()}",
        )

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ShapeTiming:
    """One shape's measured time per product (ms, median of the repeats) for each path and row bucket."""

    in_features: int
    out_features: int
    ms: dict[ProductPath, tuple[float, ...]]
    """Per path, one time per :data:`ROW_BUCKETS` entry."""

    def to_json(self) -> dict[str, list[float]]:
        return {path.value: list(times) for path, times in self.ms.items()}

    @classmethod
    def from_json(cls, shape: Shape, data: Mapping[str, Sequence[float]]) -> ShapeTiming:
        ms = {ProductPath(name): tuple(float(t) for t in times) for name, times in data.items()}
        return cls(shape[0], shape[1], ms)


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` picked for one shape, and why."""

    shape: Shape
    layout: Layout
    paths: tuple[ProductPath, ...]
    """Per row bucket, the path run (all read ``layout``)."""
    best: tuple[ProductPath, ...]
    """Per row bucket, the fastest path measured among those allowed (any layout)."""
    worst_ratio: float
    """The largest ratio, over the row buckets, of the chosen path's time to the fastest one's (1.0: the
    chosen path is the fastest at every row count)."""
    measured: bool = True
    """False when the choice was forced (``EngineConfig.product_path``) or nothing was measured."""
    ms: tuple[float, ...] = ()
    """The chosen paths' measured times (empty when not measured)."""


def _sample_size(weights: Sequence[torch.Tensor], rows: int, l3_bytes: int) -> int:
    """How many of ``weights`` one timed pass multiplies (see :data:`MIN_SAMPLE_BYTES`)."""
    total_bytes, total_flops = 0, 0.0
    for count, weight in enumerate(weights, start=1):
        total_bytes += weight.numel() * weight.element_size()
        total_flops += 2.0 * rows * weight.numel()
        if total_flops >= MIN_SAMPLE_FLOPS or total_bytes >= max(MIN_SAMPLE_BYTES, 2 * l3_bytes):
            return count
    return len(weights)


@functools.cache
def last_level_cache_bytes() -> int:
    """The largest CPU cache's size (Linux sysfs; 32 MiB where it cannot be read)."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            text = entry.read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=32 << 20)


def _time_paths(
    paths: Sequence[ProductPath],
    laid_out: Mapping[Layout, Sequence[torch.Tensor]],
    count: int,
    out_features: int,
    rows: int,
) -> dict[ProductPath, float]:
    """Median ms per product of each path over the first ``count`` laid-out weights, the paths
    alternating; a repeat loops over them often enough to last :data:`MIN_REPEAT_S`."""
    in_features = int(laid_out[Layout.PLAIN][0].shape[1])
    x = torch.randn(rows, in_features)

    def runner(path: ProductPath) -> Callable[[int], None]:
        weights = laid_out[path.layout][:count]

        def run(loops: int) -> None:
            for _ in range(loops):
                for weight in weights:
                    run_path(path, x, weight, None, out_features)

        return run

    runs = {path: runner(path) for path in paths}
    first = {}
    for path, run in runs.items():  # warm-up: first calls set up oneDNN's primitives, page in copies
        run(1)
        started = time.perf_counter()
        run(1)
        first[path] = time.perf_counter() - started
    loops = max(1, math.ceil(MIN_REPEAT_S / max(min(first.values()), 1e-7)))
    one_round = loops * sum(first.values())
    repeats = min(MAX_REPEATS, max(MIN_REPEATS, int(TARGET_MEASUREMENT_S / max(one_round, 1e-7))))
    times: dict[ProductPath, list[float]] = {path: [] for path in paths}
    order = list(runs)
    for repeat in range(repeats):
        stop_point()
        for path in order[repeat % len(order) :] + order[: repeat % len(order)]:
            started = time.perf_counter()
            runs[path](loops)
            times[path].append(time.perf_counter() - started)
    return {path: 1000 * statistics.median(t) / (loops * count) for path, t in times.items()}


def calibrate(
    weights_by_shape: Mapping[Shape, Sequence[torch.Tensor]], paths: Sequence[ProductPath]
) -> dict[Shape, ShapeTiming]:
    """Time ``paths`` on each shape's weights (plain fp32 CPU tensors, see module docstring)."""
    l3 = last_level_cache_bytes()
    timings: dict[Shape, ShapeTiming] = {}
    layouts = list(dict.fromkeys([Layout.PLAIN, *(path.layout for path in paths)]))
    with torch.inference_mode():
        for shape, weights in weights_by_shape.items():
            sample = list(weights[: max(_sample_size(weights, rows, l3) for rows in ROW_BUCKETS)])
            laid_out = {layout: [lay_out(w, layout) for w in sample] for layout in layouts}
            per_bucket: dict[ProductPath, list[float]] = {path: [] for path in paths}
            for rows in ROW_BUCKETS:
                count = _sample_size(sample, rows, l3)
                for path, ms in _time_paths(paths, laid_out, count, shape[1], rows).items():
                    per_bucket[path].append(ms)
            del laid_out
            timings[shape] = ShapeTiming(shape[0], shape[1], {p: tuple(t) for p, t in per_bucket.items()})
    return timings


def choose(timing: ShapeTiming, allowed: Sequence[ProductPath]) -> Choice:
    """The layout and per-row-bucket paths for ``timing``'s shape among ``allowed`` (module docstring)."""
    measured = [path for path in allowed if path in timing.ms]
    if not measured:
        raise ValueError(
            f"none of {list(allowed)} was measured for {timing.in_features}x{timing.out_features}"
        )
    buckets = range(len(ROW_BUCKETS))
    best = tuple(min(measured, key=lambda p, b=b: timing.ms[p][b]) for b in buckets)  # type: ignore[misc]
    best_ms = [timing.ms[best[b]][b] for b in buckets]
    options = []
    for layout in dict.fromkeys(path.layout for path in measured):
        own = [path for path in measured if path.layout is layout]
        paths = tuple(min(own, key=lambda p, b=b: timing.ms[p][b]) for b in buckets)  # type: ignore[misc]
        ms = tuple(timing.ms[paths[b]][b] for b in buckets)
        ratio = max(m / max(b_ms, 1e-9) for m, b_ms in zip(ms, best_ms, strict=True))
        options.append((ratio, sum(ms), layout, paths, ms))
    ratio, _, layout, paths, ms = min(options, key=lambda option: (option[0], option[1]))
    shape = (timing.in_features, timing.out_features)
    return Choice(shape, layout, paths, best, worst_ratio=ratio, ms=ms)


def forced_choice(shape: Shape, path: ProductPath) -> Choice:
    """``path`` at every row count (no measurement)."""
    paths = (path,) * len(ROW_BUCKETS)
    return Choice(shape, path.layout, paths, paths, worst_ratio=1.0, measured=False)


def calibration_file(directory: Path, key: MachineKey | None = None) -> Path:
    """The file in ``directory`` holding the timings measured on ``key`` (default: this machine's)."""
    return directory / f"calibration-{(key or MachineKey.here()).digest}.json"


@dataclass
class CalibrationCache:
    """The timings measured on one :class:`MachineKey`, as stored in its JSON file."""

    directory: Path
    key: MachineKey = field(default_factory=MachineKey.here)

    @property
    def path(self) -> Path:
        return calibration_file(self.directory, self.key)

    def load(self) -> dict[Shape, ShapeTiming]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        timings = {}
        for name, entry in data.get("shapes", {}).items():
            with contextlib.suppress(ValueError, TypeError, KeyError):
                k, n = (int(v) for v in name.split("x"))
                timing = ShapeTiming.from_json((k, n), entry)
                if all(len(times) == len(ROW_BUCKETS) for times in timing.ms.values()):
                    timings[(k, n)] = timing
        return timings

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this machine key's lock (so that concurrent processes measure a shape once)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / f".calibration-{self.key.digest}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def save(self, timings: Mapping[Shape, ShapeTiming]) -> None:
        data = {
            "key": asdict(self.key),
            "row_buckets": list(ROW_BUCKETS),
            "shapes": {f"{k}x{n}": timing.to_json() for (k, n), timing in sorted(timings.items())},
        }
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(data, indent=1) + "\n")
        partial.replace(self.path)


@dataclass(frozen=True)
class CalibrationResult:
    """Timings for the shapes asked about, and what measuring them took."""

    timings: dict[Shape, ShapeTiming]
    measured_shapes: int
    """Shapes measured now (the others came from the cache)."""
    seconds: float
    cache_file: Path


def calibrated_timings(
    shapes: Sequence[Shape],
    weights_of: Callable[[Shape], Sequence[torch.Tensor]],
    paths: Sequence[ProductPath],
    directory: Path,
) -> CalibrationResult:
    """Each shape's timings of ``paths``: from the cache, measuring (and caching) what is missing on the
    weights ``weights_of`` gives for the shape (asked only for shapes not in the cache)."""
    cache = CalibrationCache(directory)
    started = time.perf_counter()
    with cache.locked():
        known = cache.load()
        missing = {
            shape: weights_of(shape)
            for shape in dict.fromkeys(shapes)
            if shape not in known or any(path not in known[shape].ms for path in paths)
        }
        if missing:
            logger.warning(
                "measuring this machine's matrix-product kernels for %d shapes (once; cached in %s)",
                len(missing),
                cache.path,
            )
            for shape, timing in calibrate(missing, paths).items():
                merged = dict(known[shape].ms) if shape in known else {}
                merged.update(timing.ms)
                known[shape] = ShapeTiming(shape[0], shape[1], merged)
            cache.save(known)
    timings = {shape: known[shape] for shape in shapes}
    return CalibrationResult(timings, len(missing), time.perf_counter() - started, cache.path)


def uncalibrated(shapes: Sequence[Shape], paths: Sequence[ProductPath], directory: Path) -> list[Shape]:
    """The shapes of ``shapes`` whose timings of ``paths`` are not cached in ``directory`` (read without
    the lock: a file is replaced whole, and a shape measured meanwhile is measured again at most)."""
    known = CalibrationCache(directory).load()
    return [
        shape
        for shape in dict.fromkeys(shapes)
        if shape not in known or any(path not in known[shape].ms for path in paths)
    ]
