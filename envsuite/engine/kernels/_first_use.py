"""First use on a machine: a kernel plan at once, the slow parts of the real one in the background.

The first engine on a new CPU would otherwise wait for the native kernels' build (20-60 s on two
cores, longer on a loaded box) and the calibration of every product shape (``_calibration``) before
its first token: 207 s on a Zen 3 box (issue 51). :func:`kernel_plan` waits only for what is already
there. Where the build is not on disk, or the model's shapes are not in the calibration cache, it
returns a *first-use plan*: every product through ``F.linear`` (torch's MKL products on the weights as
loaded: no layout to make, no build, no measurement) and, with the native kernels not yet loaded, the
lean step through torch's operations. A :class:`Preparation` thread meanwhile builds the kernels and
measures the model's shapes into the caches, so every engine made after it (a later process, or a
later engine in this one) gets the measured plan. Every path samples the same tokens (the tests hold
each to transformers' forward), so which plan an engine got changes its speed only.

A build or calibration that fails in the background is logged, never raised: the engine keeps its
first-use plan, and a failed build is remembered as usual (``_native``).

``$ENVSUITE_KERNEL_SETUP=wait`` (:class:`KernelSetup`) restores waiting for both before the first step,
for benchmarks that time the measured plan and for tests that check what it chose.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import threading
from collections.abc import Collection, Sequence
from pathlib import Path

import torch

from envsuite.engine._background import start_background
from envsuite.engine.kernels._calibration import Shape, cache_directory, uncalibrated
from envsuite.engine.kernels._native import native_kernels, native_kernels_built
from envsuite.engine.kernels._plan import KernelPlan, ProductSite, product_sites, sample_sites, weights_of
from envsuite.engine.kernels._preparation import PathOptions, Preparation
from envsuite.engine.kernels._products import ProductPath, usable_paths

logger = logging.getLogger(__name__)

SETUP_ENV = "ENVSUITE_KERNEL_SETUP"


class KernelSetup(enum.StrEnum):
    """Whether an engine's first use on a machine waits for the native build and the calibration."""

    BACKGROUND = "background"
    """The default: a first-use plan now, the build and calibration on a thread (module docstring)."""
    WAIT = "wait"
    """Build and measure before the plan is returned (the measured plan from the first engine on)."""


def kernel_setup() -> KernelSetup:
    """``$ENVSUITE_KERNEL_SETUP``, else :attr:`KernelSetup.BACKGROUND`."""
    name = os.environ.get(SETUP_ENV, "").strip().lower() or KernelSetup.BACKGROUND.value
    try:
        return KernelSetup(name)
    except ValueError:
        choices = ", ".join(setup.value for setup in KernelSetup)
        raise ValueError(f"${SETUP_ENV}={name!r} is not a kernel setup; choose one of {choices}") from None


def _sampled_weights(samples: dict[Shape, list[ProductSite]], shape: Shape) -> list[torch.Tensor]:
    return weights_of(samples[shape], shape)


_running: dict[tuple[Path, tuple[Shape, ...]], Preparation] = {}
_running_lock = threading.Lock()


def _prepare(
    model: torch.nn.Module, shared: Collection[int], directory: Path, options: PathOptions
) -> Preparation:
    """Start (or join) the background preparation for ``model``'s product shapes."""
    sites = product_sites(model, shared)
    shapes = tuple(dict.fromkeys(site.shape for site in sites))
    with _running_lock:
        running = _running.get((directory, shapes))
        if running is not None and running.finished is None:
            return running
        # The sites are chosen now, before the engine lays its layers out (and fuses groups); their
        # weights (at most a timed pass's worth per shape) are copied out on the thread, not before the
        # first token.
        samples = {shape: sample_sites(sites, shape) for shape in shapes}
        preparation = Preparation(shapes, directory)
        preparation.thread = threading.Thread(
            target=preparation.run,
            args=(functools.partial(_sampled_weights, samples), sites[0].linears[0].weight.detach(), options),
            name="envsuite-kernel-preparation",
            daemon=True,
        )
        _running[(directory, shapes)] = preparation
    logger.warning(
        "first use of envsuite's kernels on this machine: sampling through F.linear now; building and "
        "measuring the native kernels in the background (once; later engines use them)"
    )
    start_background(preparation.thread)
    return preparation


def kernel_plan(
    model: torch.nn.Module,
    shared: Collection[int] = (),
    *,
    onednn: bool = True,
    relayout: bool = True,
    native: bool = True,
    path: str | None = None,
    among: Sequence[str] | None = None,
    cache: str | None = None,
    setup: KernelSetup | None = None,
) -> KernelPlan:
    """The plan for a frozen ``model``'s products (``EngineConfig``'s knobs, see there): the paths
    allowed and usable here (of ``among``'s names, if given), ``path`` forced everywhere if given,
    else measured (cached in ``cache``); on first use a first-use plan (module docstring) unless
    ``setup`` (default ``$ENVSUITE_KERNEL_SETUP``) is :attr:`KernelSetup.WAIT`."""
    sites = product_sites(model, shared)
    weights = [site.linears[0].weight for site in sites]
    sample = weights[0] if weights else torch.empty(0, device="meta")
    directory = cache_directory(cache)
    options = PathOptions(onednn, relayout, native)
    # A forced path or a named set of paths is a benchmark's or a test's choice: it gets what it named.
    background = (setup or kernel_setup()) is KernelSetup.BACKGROUND and path is None and among is None
    if background and weights and native and not native_kernels_built():
        return _first_use_plan(model, shared, directory, options, native_loaded=False)
    status = native_kernels() if native else None
    native_note = status.describe() if status is not None else "turned off"
    loaded = status is not None and status.available
    paths = usable_paths(sample, onednn=onednn, relayout=relayout, native=loaded)
    if among is not None:
        wanted = [ProductPath(name) for name in among]
        paths = tuple(p for p in paths if p in wanted) or (ProductPath.F_LINEAR,)
    if path is not None:
        forced = ProductPath(path)
        if forced not in paths:
            raise ValueError(
                f"product path {forced.value!r} is not usable here (usable: {[p.value for p in paths]}; "
                f"native kernels: {native_note})"
            )
        return KernelPlan.forced(forced, native=native_note, native_loaded=loaded)
    if len(paths) == 1 or not weights:
        return KernelPlan.forced(paths[0], native=native_note, native_loaded=loaded)
    if background and uncalibrated([site.shape for site in sites], paths, directory):
        return _first_use_plan(model, shared, directory, options, native_loaded=loaded, note=native_note)
    return KernelPlan.measured(model, paths, directory, shared, native=native_note, native_loaded=loaded)


def _first_use_plan(
    model: torch.nn.Module,
    shared: Collection[int],
    directory: Path,
    options: PathOptions,
    native_loaded: bool,
    note: str = "being built in the background",
) -> KernelPlan:
    """``F.linear`` everywhere now, the real plan prepared for later engines (module docstring)."""
    preparation = _prepare(model, shared, directory, options)
    path = ProductPath.F_LINEAR
    return KernelPlan(
        paths=(path,), forced_path=path, native=note, native_loaded=native_loaded, preparation=preparation
    )
