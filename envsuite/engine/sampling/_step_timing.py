"""Timing the decode step's ways (``_step_choice``) on a model's own weights, and the engine's use of it.

:func:`engine_plan` is what a :class:`SamplingEngine` calls for its kernel plan: the product
calibration's plan as before, and, where the engine runs the default step (the lean Llama step, every
kernel allowed, nothing forced), the step's ways timed per row bucket it can reach: each
:class:`Products` setting on its own copy of the plain model, laid out as an engine with that setting
lays it out (all four held at once), each of its :class:`StepMode` steps on one prefilled batch of that
many rows, every way of every setting alternating (the box's speed drifts), :data:`ROUNDS` rounds of :data:`STEPS` steps after one warm-up each; a way's time is the
least of its timed steps (the box is shared: the least is the one the least disturbed). The chosen
setting then lays out the engine's model, and :func:`apply_modes` sets the decoder's mode per bucket.

Cost, once per machine key and model shape (cached per bucket): SmolLM2-135M, seven buckets (1-64
rows), 49 timed steps per bucket, measured once at 955 s on the 2-core AMD EPYC box under a load
average of 13-25 (other engineers' jobs; the settings then timed one after the other), not yet on an
idle box (docs/benchmarks.md). First use is not slowed: the first
engine on a machine gets the first-use plan (``_first_use``) and measures nothing here; an engine whose
buckets are not cached runs the fixed default (:data:`DEFAULT_WAY`) and times the ways on a background
thread (a copy of the plain model) for the engines after it, unless ``$ENVSUITE_KERNEL_SETUP=wait``,
where it measures before its first step (``envsuite doctor``, benchmarks).
"""

from __future__ import annotations

import copy
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel

from envsuite.engine._background import BackgroundStopped, start_background, stop_point
from envsuite.engine.kernels import (
    ROW_BUCKETS,
    KernelPlan,
    KernelSetup,
    cache_directory,
    kernel_plan,
    kernel_setup,
    lay_out_frozen_linears,
    onednn_fits,
)
from envsuite.engine.sampling._kv_batch import KVBatch, prefill
from envsuite.engine.sampling._llama_decode import LlamaDecoder, lean_step_covers, llama_decoder
from envsuite.engine.sampling._requests import EngineConfig
from envsuite.engine.sampling._step_choice import (
    Products,
    StepChoice,
    StepMode,
    StepWay,
    choose_step,
    decode_buckets,
    load_step_times,
    model_signature,
    save_step_times,
    step_cache_file,
    step_choice_wanted,
)
from envsuite.engine.sampling._token_choice import RowSampling, choose_tokens, make_generator

logger = logging.getLogger(__name__)

ROUNDS, STEPS = 3, 2
"""Alternating rounds per bucket and products setting, timed steps per mode and round."""
MAX_TIMED_BYTES = 1 << 30
"""Models of more weight bytes than this run the fixed default untimed: the timing holds a laid-out
copy of the weights per products setting at once (four), so that their ways alternate."""
PROMPT_TOKENS = 8
"""Each timed row's prompt (the step's time barely depends on it at these lengths)."""


def apply_modes(decoder: LlamaDecoder, modes: Mapping[int, StepMode]) -> LlamaDecoder:
    """``decoder`` running each bucket of ``modes`` in its mode (the others as they were)."""
    captured_at = list(decoder.captured_at)
    by_op = [False] * len(ROW_BUCKETS)
    for bucket, mode in modes.items():
        index = ROW_BUCKETS.index(bucket)
        captured_at[index] = mode is not StepMode.LAYERS
        by_op[index] = mode is StepMode.CAPTURED
    decoder.captured_at = tuple(captured_at)
    if decoder.captured is not None:
        decoder.captured = decoder.captured.by_op_at(by_op)
    return decoder


def _plan(
    model: PreTrainedModel, products: Products, config: EngineConfig, shared: Collection[int]
) -> KernelPlan:
    return kernel_plan(
        model,
        shared,
        relayout=config.reorder_weights,
        native=config.native_kernels and products.native,
        path=products.path,
        among=products.among,
        cache=config.kernel_cache,
        setup=KernelSetup.WAIT,
    )


def _modes_here(decoder: LlamaDecoder, bucket: int) -> list[StepMode]:
    """The modes ``decoder`` can run at ``bucket`` (the team only where every product is on panels)."""
    if decoder.captured is None:
        return [StepMode.LAYERS]
    team = decoder.captured.team_by_bucket[ROW_BUCKETS.index(bucket)]
    return [StepMode.TEAM] * team + [StepMode.CAPTURED, StepMode.LAYERS]


def _laid_out(
    plain: PreTrainedModel, config: EngineConfig
) -> dict[Products, tuple[PreTrainedModel, LlamaDecoder]]:
    """Per products setting usable here, a copy of ``plain`` laid out as it says, and its decoder."""
    settings = {}
    for products in Products:
        model = copy.deepcopy(plain)
        try:
            plan = _plan(model, products, config, ())
        except ValueError:  # a path this setting forces is not usable here: nothing to time
            continue
        lay_out_frozen_linears(model, plan)
        decoder = llama_decoder(model, native=products.native and config.native_kernels)
        if decoder is not None:
            settings[products] = (model, decoder)
    return settings


def _time_bucket(
    settings: Mapping[Products, tuple[PreTrainedModel, LlamaDecoder]], bucket: int
) -> dict[StepWay, float]:
    """Least ms per step of every way at ``bucket`` rows, all of them alternating (module docstring)."""
    steps: dict[StepWay, Callable[[], float]] = {}
    for products, (model, decoder) in settings.items():
        vocab = int(model.config.vocab_size)
        generator = torch.Generator().manual_seed(bucket)
        prompts = [
            torch.randint(100, vocab, (PROMPT_TOKENS,), generator=generator).tolist() for _ in range(bucket)
        ]
        rows = [RowSampling(1.0, -1, 1.0, make_generator(i)) for i in range(bucket)]
        batch = prefill(model, prompts, False).batch
        for mode in _modes_here(decoder, bucket):
            variant = apply_modes(copy.copy(decoder), {bucket: mode})
            steps[StepWay(products, mode)] = functools.partial(_step, model, batch, variant, rows)
    ways = list(steps)
    best = {way: steps[way]() for way in ways}  # warm-up (its time counts only if least)
    for round_ in range(ROUNDS):
        for way in ways[round_ % len(ways) :] + ways[: round_ % len(ways)]:
            stop_point()
            best[way] = min([best[way], *(steps[way]() for _ in range(STEPS))])
    return {way: 1000 * seconds for way, seconds in best.items()}


def _step(model: PreTrainedModel, batch: KVBatch, decoder: LlamaDecoder, rows: list[RowSampling]) -> float:
    """One engine step of ``batch`` (the forward and the rows' tokens); its seconds."""
    started = time.perf_counter()
    logits = batch.step(model, decoder)
    batch.pending_B = choose_tokens(logits, rows, native=decoder.native).tokens_B
    return time.perf_counter() - started


def time_step_ways(
    plain: PreTrainedModel, buckets: Sequence[int], config: EngineConfig
) -> dict[int, dict[StepWay, float]]:
    """Each way's least ms per step at each of ``buckets``, on copies of the ``plain`` model (its linear
    layers as loaded; not changed), every way of every setting alternating: the box's speed drifts
    (other work comes and goes), and settings timed one after the other would drift apart."""
    with torch.inference_mode():
        settings = _laid_out(plain, config)
        try:
            return {bucket: _time_bucket(settings, bucket) for bucket in buckets}
        finally:
            settings.clear()
            gc.collect()


def measures_step(model: PreTrainedModel, config: EngineConfig, shared: Collection[int]) -> bool:
    """Whether an engine of ``config`` on ``model`` chooses its step by timing it (module docstring)."""
    weight = model.get_input_embeddings().weight
    return (
        step_choice_wanted()
        and config.onednn_products
        and config.lean_decode
        and config.captured_step
        and config.native_kernels
        and config.reorder_weights
        and config.product_path is None
        and config.product_paths is None
        and not shared
        and isinstance(weight, torch.Tensor)
        and onednn_fits(weight)
        and lean_step_covers(model.config)
        and sum(p.numel() * p.element_size() for p in model.parameters()) <= MAX_TIMED_BYTES
    )


_running: dict[tuple[Path, str], threading.Thread] = {}
_running_lock = threading.Lock()


def _measure(
    plain: PreTrainedModel, missing: Sequence[int], config: EngineConfig, file: Path, signature: str
) -> float:
    """Time the ways at ``missing`` buckets and cache them; the seconds it took."""
    started = time.perf_counter()
    logger.warning(
        "timing this machine's decode step ways at %s rows (once; cached in %s)",
        ", ".join(str(b) for b in missing),
        file,
    )
    save_step_times(file, signature, time_step_ways(plain, missing, config))
    return time.perf_counter() - started


def _measure_in_background(
    plain: PreTrainedModel, missing: Sequence[int], config: EngineConfig, file: Path, signature: str
) -> None:
    def run() -> None:
        try:
            _measure(plain, missing, config, file, signature)
        except BackgroundStopped:  # the process is exiting: nothing is cached, the next one measures
            return
        except Exception:  # a background measurement never fails the engine: it keeps the fixed default
            logger.exception("timing the decode step's ways failed; engines keep the fixed default")

    with _running_lock:
        running = _running.get((file, signature))
        if running is not None and running.is_alive():
            return
        # the copy is taken now, before the engine lays its own model out
        thread = threading.Thread(target=run, name="envsuite-step-timing", daemon=True)
        plain = copy.deepcopy(plain)
        _running[(file, signature)] = thread
    start_background(thread)


def step_choice(model: PreTrainedModel, config: EngineConfig, wait: bool | None = None) -> StepChoice | None:
    """The measured step choice for an engine of ``config`` on the plain ``model`` at the buckets its
    batches reach: read from the cache, the missing buckets measured now (``wait``, default
    ``$ENVSUITE_KERNEL_SETUP=wait``), else in the background (None until they are cached)."""
    buckets = decode_buckets(config.max_batch_size)
    file = step_cache_file(cache_directory(config.kernel_cache))
    signature = model_signature(model.config)
    known = load_step_times(file, signature)
    missing = [b for b in buckets if b not in known]
    seconds = 0.0
    if missing:
        if not (kernel_setup() is KernelSetup.WAIT if wait is None else wait):
            _measure_in_background(model, missing, config, file, signature)
            return None
        seconds = _measure(model, missing, config, file, signature)
        known = load_step_times(file, signature)
    ms = {b: known[b] for b in buckets if b in known}
    if len(ms) < len(buckets):
        return None
    products, modes, ratio = choose_step(ms)
    return StepChoice(ms, products, modes, ratio, tuple(missing), seconds, file)


def engine_plan(
    model: PreTrainedModel, config: EngineConfig, shared: Collection[int]
) -> tuple[KernelPlan, StepChoice | None]:
    """The kernel plan for an engine of ``config`` on ``model`` and, where it measures its step
    (:func:`measures_step`), the step choice, whose products setting the plan then follows."""
    plan = kernel_plan(
        model,
        shared,
        relayout=config.reorder_weights,
        native=config.native_kernels,
        path=config.product_path,
        among=config.product_paths,
        cache=config.kernel_cache,
    )
    if (
        plan.preparation is not None
        or plan.forced_path is not None
        or not measures_step(model, config, shared)
    ):
        return plan, None
    choice = step_choice(model, config)
    if choice is not None and choice.products is not Products.CALIBRATED:
        plan = _plan(model, choice.products, config, shared)
    return plan, choice
