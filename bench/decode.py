"""Decoding speed against this machine's roofline and llama.cpp: ms per token step, batch 1 to 64.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/decode.py [--batches 1,2,4,8,16,32,64] [--steps 12]
        [--repeats 3] [--prompt-tokens 48] [--llama-cpp [--llama-cpp-one-at-a-time]] [--report] [--kernel-cache DIR]
        [--json PATH] [--png PATH]

One decode step = one token for every running row: the forward pass over the KV cache plus the
engine's per-row sampling (temperature 1, each row its own generator), exactly what the sampling
engine does between two admissions. SmolLM2-135M-Instruct, fp32, all of torch's threads.

1. **Roofline**, measured in the same run: the fp32 matmul peak (best of several 2048^3 products) and
   the memory read bandwidth (summing a 512 MiB tensor). A step needs ``2 * P * B`` FLOPs (``P`` = the
   matmul weights, LM head included) and must read the ``4 * P`` bytes of weights plus the rows' KV
   cache, so its floor is ``max(flops / peak, bytes / bandwidth)``. Both are probed again at the start
   of every alternation round (best of 3 sums, best of 2 products), and each batch size's roofline
   takes the median of its rounds' probes: this VM's bandwidth moves between ~40 and ~83 GB/s within
   minutes, and its compute with it at times (a run whose probes read 74-76 GB/s had envsuite and
   llama.cpp both ~10% slower at 16 and 32 rows than at 45 GB/s), so one probe at the start described
   the machine of another moment. Runs before 2026-11-26 used that one probe; runs of 2026-11-26
   probed the bandwidth beside each point but not the peak. The JSON keeps the run-start roofline,
   ``start_roofline_ms``, and the one from the bandwidth probed beside with the start's peak,
   ``bandwidth_only_roofline_ms``.
2. **Calibration**: the engine's kernel plan for the model (``envsuite.engine.kernels``), measured in
   this run into ``--kernel-cache`` (default: a fresh directory under ``artifacts/``, so the choice is
   made on this machine as it is now, not read from an older cache); its time is reported (what the
   first engine on a machine pays once). ``--report`` prints what it picked per shape and why.
3. **Curve**: for each batch size, ``--repeats`` rounds of ``--steps`` steps through the engine's lean
   decode step, seven ways alternating, each on its own model copy laid out as the engine does it (but
   the op-by-op one, which shares the fixed default's) and its own prefilled batch (rows of ``--prompt-tokens`` +- 8 different tokens); median ms per step. Seven ways:
   ``F.linear`` on the model as loaded (``EngineConfig(onednn_products=False)``); oneDNN on reordered
   weights everywhere (``product_path="onednn-reordered"``: main's default before the calibration);
   the calibrated plan among torch's kernels only (``native_kernels=False``); the calibrated plan among
   torch's product kernels with the step's norms and attention through envsuite's native ones
   (``product_paths=("f-linear", "onednn", "onednn-reordered")``); the calibrated plan with envsuite's
   native kernels for everything (products, norms, attention), its layers run operation by operation
   from Python (``captured_step=False``), the same as one native call per step (``_captured_step``:
   the fixed default before 2026-11-29, ``fixed``), and the engine's default now (``calibrated``):
   every way the step can run timed whole per row bucket and the fastest run (``_step_choice``; the
   timing is part of its set-up time, what the first engines on a machine pay once).
4. **Where the time goes**: the default's timed steps run with the team's phase clock on
   (``envsuite.engine.kernels.read_team_clock``; steps 0.997-0.999 of unclocked ones), so each
   point's split (the JSON's ``team_phases_ms``) is of the very steps it timed: this VM's speed
   changes within seconds. And at batch 32: the default step's parts replayed alone on the live cache
   and the real weights (the layer products, the LM head, attention, sampling); the remainder is
   norms, rotary embeddings, activations, KV appends and Python dispatch. The other ways' layer
   products next to it.
5. With ``--llama-cpp`` (needs ``llama-cpp-python``, built from source: bench/_llama_cpp.py): llama.cpp
   on the same workload, the same weights at the same precision (the shipped Q4_1 GGUF de-quantized to
   an F32 GGUF, which is exactly what envsuite converts to fp32 safetensors), with llama.cpp's default
   F16 KV cache and with an F32 one as envsuite keeps (each run checks that llama.cpp's logits after a
   prompt match the torch model's): at every batch size, the same prompts decoded together in one
   ``llama_decode`` batch per step, greedy (no sampling: envsuite's steps include it), timed in the
   curve's alternation (each round: envsuite's ways, then llama.cpp's two KV types, ``--steps`` steps
   each; the median of the rounds' medians), so both sides see the machine alike; with ``--llama-cpp-one-at-a-time`` also 32 requests one at a
   time through llama-cpp-python's high-level ``Llama``, tokens per second.

Writes a JSON of every number and a PNG of ms per step against batch size with the roofline.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

# The bench times the measured plan, so it waits for the build and calibration (not in the background).
os.environ.setdefault("ENVSUITE_KERNEL_SETUP", "wait")

from envsuite.backends.local import load_sampling_model
from envsuite.engine.kernels import (
    CLOCK_ENV,
    TEAM_PHASES,
    KernelPlan,
    Product,
    TeamClock,
    kernel_plan,
    lay_out_frozen_linears,
    read_team_clock,
)
from envsuite.engine.sampling import RowSampling, choose_tokens, make_generator
from envsuite.engine.sampling._kv_batch import KVBatch, prefill
from envsuite.engine.sampling._llama_decode import LlamaDecoder, llama_decoder
from envsuite.engine.sampling._requests import EngineConfig
from envsuite.engine.sampling._step_choice import STEP_CHOICE_ENV
from envsuite.engine.sampling._step_timing import apply_modes, engine_plan

MODEL = "smollm2-135m-instruct"
BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _machine import Machine, PeakProbe, cpu_name, load_average, measure_machine, read_rate  # noqa: E402

WAYS = ("linear", "reordered", "torch_calibrated", "torch_products", "stepwise", "fixed", "calibrated")
"""The lean step's ways (module docstring, 3.), in the order they alternate."""
WAY_LABELS = {
    "linear": "F.linear, model as loaded",
    "reordered": "oneDNN reordered everywhere (an earlier default)",
    "torch_calibrated": "calibrated, torch's kernels only",
    "torch_products": "calibrated among torch's products, native step kernels",
    "stepwise": "calibrated with native kernels, layers op by op",
    "fixed": "calibrated with native kernels, captured step (the fixed default before 2026-11-29)",
    "calibrated": "the engine's default: the step's ways timed per bucket, the fastest run",
}
TORCH_PRODUCTS = ("f-linear", "onednn", "onednn-reordered")


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    ms: dict[str, float]
    """Median ms per step of each way (:data:`WAYS`)."""
    roofline_ms: float
    cache_positions: int
    llama_ms: dict[str, float]
    """llama.cpp's median ms per step, timed in the same alternation ("f16", "f32": its KV cache type);
    empty without ``--llama-cpp``."""
    read_gbps: float
    """The memory read bandwidth this point's roofline uses: the median of the probes taken in its
    rounds (one per round, beside the steps)."""
    start_roofline_ms: float
    """The roofline from the run's one probe at the start (how runs before 2026-11-26 computed it)."""
    matmul_gflops: float
    """The fp32 matmul peak this point's roofline uses: the median of the probes in its rounds."""
    bandwidth_only_roofline_ms: float
    """The roofline from the bandwidth probed beside the point and the run-start peak (how the runs of
    2026-11-26 computed it)."""
    team_phases_ms: dict[str, float] = field(default_factory=dict)
    """Where the default's timed steps spent their time, from the team's phase clock: per phase of
    :data:`TEAM_PHASES`, working plus waiting at its barrier, ms per step, averaged over the threads and
    the rounds (empty where the step did not run as a team). Which phase a slow point lost its time in."""

    def share(self, way: str = "calibrated") -> float:
        """The roofline's share of ``way``'s step (1.0: at the machine's limit)."""
        return self.roofline_ms / self.ms[way]


@dataclass(frozen=True)
class Breakdown:
    batch: int
    step_ms: float
    layer_matmuls_ms: float
    lm_head_ms: float
    attention_ms: float
    sampling_ms: float
    other_layer_matmuls_ms: dict[str, float]
    """The same layer products of the other ways (replayed alternately with the default's)."""

    @property
    def rest_ms(self) -> float:
        parts = self.layer_matmuls_ms + self.lm_head_ms + self.attention_ms + self.sampling_ms
        return self.step_ms - parts


@dataclass
class Way:
    """One way of running the lean step: its own model copy, laid out as the engine does it."""

    model: Any
    decoder: LlamaDecoder
    plan: KernelPlan | None
    setup_s: float


def build_way(way: str, cache: Path, default: Way | None = None) -> Way:
    """The model laid out as an engine with that way's configuration does it (``SamplingEngine``).
    ``stepwise`` shares the ``default`` way's model (the same layout) with a decoder of its own; the
    engine's default (``calibrated``) times the step's ways first (``_step_timing``), in its set-up."""
    if way == "stepwise" and default is not None:
        decoder = llama_decoder(default.model, native=True, captured=False)
        assert decoder is not None and default.decoder.captured is not None
        return Way(default.model, decoder, default.plan, 0.0)
    model = load_sampling_model(base_model=MODEL).model
    started = time.perf_counter()
    if way == "calibrated":
        os.environ[STEP_CHOICE_ENV] = "measure"
        plan, choice = engine_plan(model, EngineConfig(kernel_cache=str(cache)), ())
        lay_out_frozen_linears(model, plan)
        decoder = llama_decoder(model, native=plan.native_loaded)
        assert decoder is not None and choice is not None
        apply_modes(decoder, choice.modes)
        print("\n".join(choice.report()), flush=True)
        return Way(model, decoder, plan, time.perf_counter() - started)
    plan, native = None, False
    if way != "linear":
        native = way in ("fixed", "torch_products")
        plan = kernel_plan(
            model,
            native=native,
            path="onednn-reordered" if way == "reordered" else None,
            among=TORCH_PRODUCTS if way == "torch_products" else None,
            cache=str(cache),
        )
        lay_out_frozen_linears(model, plan)
    decoder = llama_decoder(model, native=native)  # as the engine builds its decoder
    assert decoder is not None
    return Way(model, decoder, plan, time.perf_counter() - started)


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randint(100, vocab, (length - 8 + (i * 5) % 17,), generator=generator).tolist()
        for i in range(batch)
    ]


def _rows(batch: int) -> list[RowSampling]:
    return [RowSampling(1.0, -1, 1.0, make_generator(i)) for i in range(batch)]


def _step(model: Any, batch: KVBatch, decoder: LlamaDecoder | None, rows: list[RowSampling]) -> None:
    """One engine step: the forward, then the rows' tokens, natively where the decoder's step is native
    (as the engine does it)."""
    logits = batch.step(model, decoder)
    native = decoder is not None and decoder.native
    batch.pending_B = choose_tokens(logits, rows, native=native).tokens_B


def matmul_params(model: Any) -> int:
    """Weights that take part in a matmul per token: every linear layer and the LM head (not the embedding)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def kv_bytes_per_position(model: Any) -> int:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4


def roofline_ms(params: int, model: Any, machine: Machine, batch: int, positions: int) -> float:
    flops = 2 * params * batch
    read = 4 * params + batch * positions * kv_bytes_per_position(model)
    return 1000 * max(flops / (machine.matmul_gflops * 1e9), read / (machine.read_gbps * 1e9))


@contextlib.contextmanager
def phase_clock() -> Iterator[None]:
    """The decode team's phase clock on (``ENVSUITE_DECODE_TEAM_CLOCK=1``): two clock reads per phase
    and thread (steps 0.997-0.999 of unclocked ones at 1 and 16 rows); read the sums with
    ``read_team_clock``."""
    os.environ[CLOCK_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(CLOCK_ENV)


def team_clock(step: Callable[[], None], steps: int) -> TeamClock:
    """The decode team's phase clock over ``steps`` steps."""
    read_team_clock(reset=True)
    with phase_clock():
        for _ in range(steps):
            step()
    return read_team_clock(reset=True)


def phase_ms(clock: TeamClock) -> dict[str, float]:
    """Per phase, working plus waiting, ms per step, averaged over the threads."""
    if not clock.calls:
        return {}
    threads = range(clock.threads)
    return {
        phase: sum(clock.working_us(t)[phase] + clock.waiting_us(t)[phase] for t in threads)
        / 1000
        / clock.threads
        for phase in TEAM_PHASES
    }


def curve_point(
    ways: dict[str, Way],
    params: int,
    machine: Machine,
    batch: int,
    args: argparse.Namespace,
    llamas: dict[str, Any] | None = None,
) -> CurvePoint:
    """The lean step's ways, alternating, each on its own batch; with ``llamas`` (``LlamaCpp`` per KV
    cache type) llama.cpp's batched decode of the same prompts takes its turn in every round too, so a
    drift in the machine's speed (a shared VM's memory bandwidth moves by tens of percent) touches
    both sides alike."""
    any_model = ways["linear"].model
    vocab = int(any_model.config.vocab_size)
    prompts = _prompts(batch, args.prompt_tokens, vocab, seed=batch)
    probe = torch.ones(512 * 1024 * 1024 // 4)  # the machine probe's tensor (bench/_machine.py)
    peak = PeakProbe(machine)
    read_gbps: list[float] = []
    gflops: list[float] = []
    with torch.inference_mode():
        batches = {name: prefill(way.model, prompts, False).batch for name, way in ways.items()}
        rows = _rows(batch)
        for name, way in ways.items():
            _step(way.model, batches[name], way.decoder, rows)
        times: dict[str, list[float]] = {name: [] for name in ways}
        llama_times: dict[str, list[float]] = {kv: [] for kv in llamas or {}}
        read_team_clock(reset=True)
        for _ in range(args.repeats):
            read_gbps.append(read_rate(probe))
            gflops.append(peak.gflops())
            for name, way in ways.items():
                step = functools.partial(_step, way.model, batches[name], way.decoder, rows)
                # the default's timed steps carry the phase clock: its split is of these very steps
                with phase_clock() if name == "calibrated" else contextlib.nullcontext():
                    times[name].append(_median_ms(step, args.steps))
            for kv, llama in (llamas or {}).items():
                llama_times[kv].append(llama.batched_ms(prompts, args.steps))
        positions = batches["linear"].length
        clock = read_team_clock(reset=True)
    here = replace(machine, read_gbps=statistics.median(read_gbps), matmul_gflops=statistics.median(gflops))
    return CurvePoint(
        batch,
        {n: statistics.median(t) for n, t in times.items()},
        roofline_ms(params, any_model, here, batch, positions),
        positions,
        {kv: statistics.median(t) for kv, t in llama_times.items()},
        here.read_gbps,
        roofline_ms(params, any_model, machine, batch, positions),
        here.matmul_gflops,
        roofline_ms(params, any_model, replace(here, matmul_gflops=machine.matmul_gflops), batch, positions),
        phase_ms(clock),
    )


def _layer_products(decoder: LlamaDecoder) -> list[tuple[Product, ...]]:
    return [(*w.qkv, w.o, *w.mlp_in, w.down) for w in decoder.layers]


def breakdown(ways: dict[str, Way], batch: int, args: argparse.Namespace) -> Breakdown:
    """The default step's parts replayed alone on the live cache and the real weights (module docstring)."""
    default = ways["calibrated"]
    model, decoder = default.model, default.decoder
    vocab = int(model.config.vocab_size)
    prompts = _prompts(batch, args.prompt_tokens, vocab, seed=1000 + batch)
    with torch.inference_mode():
        kv = prefill(model, prompts, False).batch
        rows = _rows(batch)
        for _ in range(4):
            _step(model, kv, decoder, rows)
        x = torch.randn(batch, 1, model.config.hidden_size)
        wide = torch.randn(batch, 1, model.config.intermediate_size)

        def matmuls(layers: list[tuple[Product, ...]]) -> Callable[[], None]:
            """Every layer's products in order: all on the hidden state but the last (down, on the wide one)."""

            def run() -> None:
                for *narrow, down in layers:
                    for product in narrow:
                        product(x)
                    down(wide)

            return run

        products = {name: matmuls(_layer_products(way.decoder)) for name, way in ways.items()}
        product_ms: dict[str, list[float]] = {name: [] for name in products}
        for _ in range(args.repeats):
            for name, run in products.items():
                product_ms[name].append(_median_ms(run, args.steps))
        layer_ms = {name: statistics.median(times) for name, times in product_ms.items()}
        mask = decoder.attention_mask(kv.mask_B_L)
        group = decoder.heads // decoder.kv_heads
        query = torch.randn(batch, decoder.kv_heads, group, decoder.head_dim)
        layers = [(layer.keys, layer.values) for layer in kv.cache.layers]

        def attention() -> None:
            for keys, values in layers:
                decoder.attend(query, keys, values, mask)

        logits = torch.randn(batch, vocab)
        return Breakdown(
            batch=batch,
            step_ms=_median_ms(lambda: _step(model, kv, decoder, rows), args.steps * args.repeats),
            layer_matmuls_ms=layer_ms.pop("calibrated"),
            lm_head_ms=_median_ms(lambda: decoder.lm_head(x), args.steps),
            attention_ms=_median_ms(attention, args.steps),
            sampling_ms=_median_ms(lambda: choose_tokens(logits, rows, native=decoder.native), args.steps),
            other_layer_matmuls_ms=layer_ms,
        )


@dataclass
class LlamaCppSides:
    """llama.cpp with its default F16 KV cache and with an F32 one (envsuite's): the open models by KV
    type, and the JSON record (each model's logits checked against the torch model's after a prompt)."""

    models: dict[str, Any]
    record: dict[str, Any]

    def close(self) -> None:
        for llama in self.models.values():
            llama.close()
        self.models = {}


def open_llama_cpp(model: Any, threads: int, args: argparse.Namespace) -> LlamaCppSides:
    """Both KV types open and checked; the caller closes them (:meth:`LlamaCppSides.close`)."""
    from _llama_cpp import LlamaCpp

    vocab = int(model.config.vocab_size)
    probe = _prompts(1, args.prompt_tokens, vocab, seed=7)[0]
    with torch.inference_mode():
        ours = model(torch.tensor([probe])).logits[0, -1].float().numpy()
    sides = LlamaCppSides({}, {"threads": threads})
    try:
        for kv_cache in ("f16", "f32"):
            llama = sides.models[kv_cache] = LlamaCpp(threads, kv_f16=kv_cache == "f16")
            sides.record["weights"] = f"{llama.path} (the shipped Q4_1 GGUF de-quantized to F32)"
            theirs = llama.last_logits(probe)
            sides.record[f"kv_{kv_cache}"] = {
                "logits_max_abs_diff": float(abs(ours - theirs).max()),
                "same_argmax": bool(ours.argmax() == theirs.argmax()),
            }
    except BaseException:
        sides.close()
        raise
    return sides


def finish_llama_cpp(
    sides: LlamaCppSides, points: list[CurvePoint], args: argparse.Namespace
) -> dict[str, Any]:
    """The record with the curve timed in the alternation (and, if asked, requests one at a time)."""
    result = sides.record
    for kv_cache, llama in sides.models.items():
        one_at_a_time = (
            llama.one_at_a_time_tokens_per_s(
                _prompts(32, args.prompt_tokens, llama.vocab, seed=32), args.steps * args.repeats
            )
            if args.llama_cpp_one_at_a_time
            else None
        )
        result[f"kv_{kv_cache}"] |= {
            "curve_ms": {point.batch: point.llama_ms[kv_cache] for point in points},
            "one_at_a_time_tokens_per_s": one_at_a_time,
        }
    return result


def plot(points: list[CurvePoint], machine: Machine, llama: dict[str, Any] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    batches = [p.batch for p in points]
    for way in WAYS:
        ax.plot(batches, [p.ms[way] for p in points], "o-", label=f"envsuite, {WAY_LABELS[way]}")
    ax.plot(
        batches,
        [p.roofline_ms for p in points],
        "k--",
        label="roofline (bandwidth and peak probed beside each point)",
    )
    if llama:
        for kv_cache in ("F16", "F32"):
            curve = sorted(llama[f"kv_{kv_cache.lower()}"]["curve_ms"].items())
            label = f"llama.cpp, F32 weights, {kv_cache} KV cache" + (
                " (its default)" if kv_cache == "F16" else ""
            )
            ax.plot([b for b, _ in curve], [ms for _, ms in curve], "s--", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rows decoded together (batch)")
    ax.set_ylabel("ms per token step (forward + sampling)")
    ax.set_title(
        f"SmolLM2-135M fp32 decode; {cpu_name()}\npeak {machine.matmul_gflops:.0f} GFLOP/s, "
        f"{machine.read_gbps:.1f} GB/s, load {machine.load_before[0]:.1f}",
        fontsize=8,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


PRODUCT_PHASES = ("q/k/v", "o", "gate/up", "down")


def _print_phases(point: CurvePoint) -> None:
    phases = point.team_phases_ms
    if not phases:
        return
    products = sum(phases[p] for p in PRODUCT_PHASES)
    rest = sum(phases.values()) - products - phases["attention"] - phases["lm head"]
    print(
        f"batch {point.batch:3d}, the default step's team: layer products {products:.1f} ms, LM head "
        f"{phases['lm head']:.1f}, attention {phases['attention']:.1f}, norms/rotary/SiLU/barriers {rest:.1f}",
        flush=True,
    )


def _print_point(point: CurvePoint, llama: dict[str, Any] | None) -> None:
    cells = "  ".join(f"{way} {point.ms[way]:6.1f}" for way in WAYS)
    line = (
        f"batch {point.batch:3d}: {cells}  roofline {point.roofline_ms:5.1f} ms ({point.share():.0%} of it; "
        f"{point.read_gbps:.1f} GB/s, {point.matmul_gflops:.0f} GFLOP/s beside it)"
    )
    if llama is not None:
        line += "  llama.cpp F16/F32 KV " + "/".join(
            f"{llama[f'kv_{kv}']['curve_ms'][point.batch]:.1f}" for kv in ("f16", "f32")
        )
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--steps", type=int, default=12, help="decode steps per timed round")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds per batch size")
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--llama-cpp", action="store_true", help="also time llama.cpp (llama-cpp-python)")
    parser.add_argument(
        "--llama-cpp-one-at-a-time", action="store_true", help="and llama.cpp's 32 requests one at a time"
    )
    parser.add_argument("--report", action="store_true", help="print the calibrated plans (per shape, why)")
    parser.add_argument(
        "--kernel-cache", type=Path, default=None, help="calibration cache (default: a fresh one per run)"
    )
    parser.add_argument("--json", type=Path, default=Path("artifacts/decode.json"))
    parser.add_argument("--png", type=Path, default=Path("artifacts/decode.png"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cache = args.kernel_cache or Path("artifacts") / f"kernel-cache-{os.getpid()}"
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    ways: dict[str, Way] = {}
    for way in sorted(WAYS, key=lambda name: name == "stepwise"):  # stepwise reuses the fixed way's model
        ways[way] = build_way(way, cache, ways.get("fixed"))
        print(f"{WAY_LABELS[way]}: set up in {ways[way].setup_s:.1f} s", flush=True)
        plan = ways[way].plan
        if args.report and plan is not None and plan.forced_path is None and way != "stepwise":
            print(plan.report(), flush=True)
    params = matmul_params(load_sampling_model(base_model=MODEL).model)
    machine = measure_machine()
    print(
        f"machine: {machine.matmul_gflops:.0f} GFLOP/s fp32 matmul (MKL {machine.mkl_gflops:.0f}, "
        f"oneDNN {machine.onednn_gflops:.0f}), {machine.read_gbps:.1f} GB/s read, "
        f"{machine.threads} threads, load {machine.load_before}",
        flush=True,
    )
    batches = [int(b) for b in args.batches.split(",")]
    sides = open_llama_cpp(ways["linear"].model, machine.threads, args) if args.llama_cpp else None
    try:
        llamas = sides.models if sides is not None else None
        points = [curve_point(ways, params, machine, batch, args, llamas) for batch in batches]
        llama = finish_llama_cpp(sides, points, args) if sides is not None else None
    finally:  # llama.cpp's models hold their weights (0.5 GB each) until closed
        if sides is not None:
            sides.close()
    for point in points:
        _print_point(point, None)
    for point in points:
        _print_phases(point)
    parts = breakdown(ways, 32, args)
    print(f"where the time goes at batch 32 (default step {parts.step_ms:.1f} ms):")
    for name in ("layer_matmuls", "lm_head", "attention", "sampling"):
        value = getattr(parts, f"{name}_ms")
        print(f"  {name:14s} {value:7.1f} ms  {value / parts.step_ms:5.0%}")
    print(f"  {'rest':14s} {parts.rest_ms:7.1f} ms  {parts.rest_ms / parts.step_ms:5.0%}")
    for way, ms in parts.other_layer_matmuls_ms.items():
        print(f"  layer products, {WAY_LABELS[way]}: {ms:.1f} ms")
    if llama is not None:
        print("with llama.cpp:")
        for point in points:
            _print_point(point, llama)
        for kv_cache in ("f16", "f32"):
            run = llama[f"kv_{kv_cache}"]
            serial = run["one_at_a_time_tokens_per_s"]
            print(
                f"llama.cpp ({kv_cache.upper()} KV): logits vs torch max |diff| {run['logits_max_abs_diff']:.2e}, "
                f"same argmax {run['same_argmax']}"
                + (f"; one request at a time {serial:.1f} tokens/s" if serial is not None else "")
            )
    calibration = ways["calibrated"].plan
    result = {
        "model": MODEL,
        "cpu": cpu_name(),
        "machine": asdict(machine),
        "load_after": load_average(),
        "host": platform.node(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
        "setup_s": {way: ways[way].setup_s for way in WAYS},
        "calibration_report": calibration.report() if calibration is not None else None,
        "curve": [asdict(p) | {"share": p.share()} for p in points],
        "breakdown": {**asdict(parts), "rest_ms": parts.rest_ms},
        "llama_cpp": llama,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    plot(points, machine, llama, args.png)
    print(f"wrote {args.json} and {args.png}; load average now {result['load_after']}")


def _on_worker_thread(fn: Callable[[], None]) -> None:
    """Run ``fn`` off the main thread, where the sampling engine runs (docs/backend_sampling.md: on a
    loaded machine torch ops from the main thread ran several times slower)."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised on the main thread
            errors.append(exc)

    worker = threading.Thread(target=run, name="bench")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


if __name__ == "__main__":
    _on_worker_thread(main)
