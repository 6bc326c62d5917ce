"""Decoding speed against this machine's roofline: ms per token step, batch 1 to 64, and where the time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/decode.py [--batches 1,2,4,8,16,32,64] [--steps 12]
        [--repeats 3] [--prompt-tokens 48] [--llama-cpp] [--json PATH] [--png PATH]

One decode step = one token for every running row: the forward pass over the KV cache plus the
engine's per-row sampling (temperature 1, each row its own generator), exactly what the sampling
engine does between two admissions. SmolLM2-135M-Instruct, fp32, all of torch's threads.

1. **Roofline**, measured in the same run: the fp32 matmul peak (best of several 2048^3 products) and
   the memory read bandwidth (summing a 512 MiB tensor). A step needs ``2 * P * B`` FLOPs (``P`` = the
   matmul weights, LM head included) and must read the ``4 * P`` bytes of weights plus the rows' KV
   cache, so its floor is ``max(flops / peak, bytes / bandwidth)``.
2. **Curve**: for each batch size, ``--repeats`` rounds of ``--steps`` steps through ``model(...)``
   (transformers' forward) and through the engine's lean decode step, alternating, each on its own
   prefilled batch (rows of ``--prompt-tokens`` +- 8 different tokens). Median ms per step. The lean
   step runs three ways: its products through ``F.linear`` (``EngineConfig(onednn_products=False)``),
   through oneDNN on the model's plain weights (``EngineConfig(reorder_weights=False)``), and through
   oneDNN on the reordered weights that replace the plain ones in the engine's model (the default;
   a second copy of the model here, reordered as the engine does it).
3. **Where the time goes** at batch 32: the default step's parts replayed alone on the live cache and
   the real weights (the 120 layer matmuls: fused query/key/value, output, fused gate/up and down
   projections per layer; the LM head, attention, sampling); the remainder is norms, rotary
   embeddings, activations, KV appends and Python. Next to it, the same layer products through
   ``F.linear`` and on the plain weights (150 products: gate and up separate there), and on
   reordered weights as 210 separate products (no fusion at all) and with gate and up separate
   (150 products, the default before the gate/up fusion), replayed alternately with the shipped ones.
4. With ``--llama-cpp`` (needs ``pip install llama-cpp-python``): llama.cpp on the same workload, the
   same weights at the same precision (the shipped Q4_1 GGUF de-quantized to an F32 GGUF, which is
   exactly what envsuite converts to fp32 safetensors), with llama.cpp's default F16 KV cache and
   with an F32 one as envsuite keeps (each run checks that llama.cpp's logits after a prompt match the
   torch model's): at every batch size, the same prompts decoded together in one
   ``llama_decode`` batch per step, greedy, median ms per step (``--steps`` x ``--repeats`` steps);
   and 32 requests one at a time (what a CPU user would run), tokens per second.

Writes a JSON of every number and a PNG of ms per step against batch size with the roofline.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from envsuite.backends.local import load_sampling_model
from envsuite.engine.kernels import reorder_frozen_linears, reordered_weight, route_linears_through_onednn
from envsuite.engine.sampling import RowSampling, choose_tokens, make_generator
from envsuite.engine.sampling._kv_batch import KVBatch, prefill
from envsuite.engine.sampling._llama_decode import LlamaDecoder, _Product, llama_decoder

MODEL = "smollm2-135m-instruct"
Product = Callable[[torch.Tensor], torch.Tensor]
BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _machine import Machine, load_average, measure_machine  # noqa: E402


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    hf_ms: float
    linear_ms: float
    """The lean step with its products through ``F.linear`` (``EngineConfig(onednn_products=False)``)."""
    plain_ms: float
    """The lean step through oneDNN on the plain weights (``EngineConfig(reorder_weights=False)``)."""
    lean_ms: float
    """The lean step as the engine runs it by default (oneDNN on the reordered weights)."""
    roofline_ms: float
    cache_positions: int


@dataclass(frozen=True)
class Breakdown:
    batch: int
    step_ms: float
    layer_matmuls_ms: float
    linear_step_ms: float
    linear_layer_matmuls_ms: float
    """The same layer products through ``F.linear`` (the share of the step without oneDNN)."""
    plain_step_ms: float
    plain_layer_matmuls_ms: float
    """The same layer products through oneDNN on the plain weights (``reorder_weights=False``)."""
    separate_matmuls_ms: float
    """The same layer products as 210 separate reordered products (not part of the step; for comparison)."""
    gate_up_separate_matmuls_ms: float
    """The same layer products with gate and up separate, 150 reordered products (not part of the step)."""
    lm_head_ms: float
    attention_ms: float
    sampling_ms: float

    @property
    def rest_ms(self) -> float:
        parts = self.layer_matmuls_ms + self.lm_head_ms + self.attention_ms + self.sampling_ms
        return self.step_ms - parts


@dataclass(frozen=True)
class Decoders:
    """The lean step's three ways: ``F.linear`` and oneDNN on ``model``'s plain weights, and oneDNN on
    a second copy of the model reordered as the engine does it (the default)."""

    linear: LlamaDecoder
    plain: LlamaDecoder
    default: LlamaDecoder

    @classmethod
    def of(cls, model: Any) -> Decoders:
        linear = llama_decoder(model, onednn=False)
        plain = llama_decoder(model)
        engines_model = load_sampling_model(base_model=MODEL).model
        route_linears_through_onednn(engines_model)
        report = reorder_frozen_linears(engines_model)
        default = llama_decoder(engines_model)
        assert linear is not None and plain is not None and default is not None
        assert plain.onednn and report.fused_blocks, "this torch has no oneDNN"
        return cls(linear, plain, default)


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
    logits = batch.step(model, decoder)
    batch.pending_B = choose_tokens(logits, rows).tokens_B


def matmul_params(model: Any) -> int:
    """Weights that take part in a matmul per token: every linear layer and the LM head (not the embedding)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def kv_bytes_per_position(model: Any) -> int:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4


def roofline_ms(model: Any, machine: Machine, batch: int, positions: int) -> float:
    params = matmul_params(model)
    flops = 2 * params * batch
    read = 4 * params + batch * positions * kv_bytes_per_position(model)
    return 1000 * max(flops / (machine.matmul_gflops * 1e9), read / (machine.read_gbps * 1e9))


def curve_point(
    model: Any,
    decoders: Decoders,
    machine: Machine,
    batch: int,
    args: argparse.Namespace,
) -> CurvePoint:
    """Transformers' forward and the lean step's three ways, each on its own batch."""
    vocab = int(model.config.vocab_size)
    prompts = _prompts(batch, args.prompt_tokens, vocab, seed=batch)
    ways: list[LlamaDecoder | None] = [None, decoders.linear, decoders.plain, decoders.default]
    with torch.inference_mode():
        batches = [prefill(model, prompts, False).batch for _ in ways]
        rows = _rows(batch)
        for kv, decoder in zip(batches, ways, strict=True):
            _step(model, kv, decoder, rows)
        times: list[list[float]] = [[] for _ in ways]
        for _ in range(args.repeats):
            for kv, decoder, way_ms in zip(batches, ways, times, strict=True):
                way_ms.append(_median_ms(functools.partial(_step, model, kv, decoder, rows), args.steps))
        positions = batches[1].length
    hf_ms, linear_ms, plain_ms, lean_ms = (statistics.median(way_ms) for way_ms in times)
    roofline = roofline_ms(model, machine, batch, positions)
    return CurvePoint(batch, hf_ms, linear_ms, plain_ms, lean_ms, roofline, positions)


def breakdown(model: Any, decoders: Decoders, batch: int, args: argparse.Namespace) -> Breakdown:
    """The lean step's parts replayed alone on the live cache and the real weights (see module docstring)."""
    vocab = int(model.config.vocab_size)
    prompts = _prompts(batch, args.prompt_tokens, vocab, seed=1000 + batch)
    decoder = decoders.default
    with torch.inference_mode():
        kv = prefill(model, prompts, False).batch
        rows = _rows(batch)
        for _ in range(4):
            _step(model, kv, decoder, rows)
        hidden = model.config.hidden_size
        x = torch.randn(batch, 1, hidden)
        wide = torch.randn(batch, 1, model.config.intermediate_size)

        def matmuls(layers: list[tuple[Product, ...]]) -> Callable[[], None]:
            """Every layer's products in order: all on the hidden state but the last (down, on the wide one)."""

            def run() -> None:
                for *narrow, down in layers:
                    for product in narrow:
                        product(x)
                    down(wide)

            return run

        def product(weight: torch.Tensor) -> Product:
            """A reordered product of a plain weight (as the engine's model has them)."""
            return _Product(reordered_weight(weight.contiguous()), None, onednn=True)

        q_end, k_end = decoder.q_size, decoder.q_size + decoder.kv_size
        weights = [
            (w.qkv.weight, w.o.weight, *(p.weight for p in w.mlp_in), w.down.weight)
            for w in decoders.plain.layers
        ]
        layer_matmuls = matmuls([(w.qkv, w.o, *w.mlp_in, w.down) for w in decoder.layers])
        linear_matmuls = matmuls([(w.qkv, w.o, *w.mlp_in, w.down) for w in decoders.linear.layers])
        plain_matmuls = matmuls([(w.qkv, w.o, *w.mlp_in, w.down) for w in decoders.plain.layers])
        separate_matmuls = matmuls(
            [
                tuple(map(product, (qkv[:q_end], qkv[q_end:k_end], qkv[k_end:], o, g, u, d)))
                for qkv, o, g, u, d in weights
            ]
        )
        gate_up_separate_matmuls = matmuls(
            [tuple(map(product, (qkv, o, g, u, d))) for qkv, o, g, u, d in weights]
        )

        mask = kv.mask_B_L.bool()[:, None, None, :]
        group = decoder.heads // decoder.kv_heads
        query = torch.randn(batch, decoder.kv_heads, group, decoder.head_dim)
        layers = [(layer.keys, layer.values) for layer in kv.cache.layers]

        def attention() -> None:
            for keys, values in layers:
                F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=decoder.scaling)

        logits = torch.randn(batch, vocab)
        products = {
            "layer_matmuls": layer_matmuls,
            "linear_layer_matmuls": linear_matmuls,
            "plain_layer_matmuls": plain_matmuls,
            "separate_matmuls": separate_matmuls,
            "gate_up_separate_matmuls": gate_up_separate_matmuls,
        }
        product_ms: dict[str, list[float]] = {name: [] for name in products}
        for _ in range(args.repeats):
            for name, run in products.items():
                product_ms[name].append(_median_ms(run, args.steps))
        parts = {name: statistics.median(times) for name, times in product_ms.items()}
        parts |= {
            "lm_head": _median_ms(lambda: decoder.lm_head(x), args.steps),
            "attention": _median_ms(attention, args.steps),
            "sampling": _median_ms(lambda: choose_tokens(logits, rows), args.steps),
            "step": _median_ms(lambda: _step(model, kv, decoder, rows), args.steps),
            "linear_step": _median_ms(lambda: _step(model, kv, decoders.linear, rows), args.steps),
            "plain_step": _median_ms(lambda: _step(model, kv, decoders.plain, rows), args.steps),
        }
    return Breakdown(batch=batch, **{f"{name}_ms": value for name, value in parts.items()})


def llama_cpp_curve(model: Any, batches: list[int], threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """llama.cpp on the curve's prompts at every batch size, with its default F16 KV cache and with an
    F32 one (envsuite's), each after checking its logits against the torch model's."""
    from _llama_cpp import LlamaCpp

    vocab = int(model.config.vocab_size)
    probe = _prompts(1, args.prompt_tokens, vocab, seed=7)[0]
    with torch.inference_mode():
        ours = model(torch.tensor([probe])).logits[0, -1].float().numpy()
    result: dict[str, Any] = {"threads": threads}
    for kv_cache in ("F16", "F32"):
        llama = LlamaCpp(threads, kv_f16=kv_cache == "F16")
        result["weights"] = f"{llama.path} (the shipped Q4_1 GGUF de-quantized to F32)"
        try:
            theirs = llama.last_logits(probe)
            curve = {
                batch: llama.batched_ms(
                    _prompts(batch, args.prompt_tokens, vocab, seed=batch), args.steps * args.repeats
                )
                for batch in batches
            }
            one_at_a_time = llama.one_at_a_time_tokens_per_s(
                _prompts(32, args.prompt_tokens, vocab, seed=32), args.steps * args.repeats
            )
        finally:
            llama.close()
        result[f"kv_{kv_cache.lower()}"] = {
            "logits_max_abs_diff": float(abs(ours - theirs).max()),
            "same_argmax": bool(ours.argmax() == theirs.argmax()),
            "curve_ms": curve,
            "one_at_a_time_tokens_per_s": one_at_a_time,
        }
    return result


def plot(points: list[CurvePoint], machine: Machine, llama: dict[str, Any] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    batches = [p.batch for p in points]
    ax.plot(batches, [p.hf_ms for p in points], "o-", label="envsuite, transformers forward")
    ax.plot(batches, [p.linear_ms for p in points], "o-", label="envsuite, lean step, F.linear products")
    ax.plot(batches, [p.plain_ms for p in points], "o-", label="envsuite, lean step, oneDNN plain weights")
    ax.plot(
        batches, [p.lean_ms for p in points], "o-", label="envsuite, lean step, reordered weights (default)"
    )
    ax.plot(batches, [p.roofline_ms for p in points], "k--", label="roofline (this machine)")
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
        f"SmolLM2-135M fp32 decode; peak {machine.matmul_gflops:.0f} GFLOP/s, "
        f"{machine.read_gbps:.1f} GB/s, load {machine.load_before[0]:.1f}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--steps", type=int, default=12, help="decode steps per timed round")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds per batch size")
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--llama-cpp", action="store_true", help="also time llama.cpp (llama-cpp-python)")
    parser.add_argument("--json", type=Path, default=Path("artifacts/decode.json"))
    parser.add_argument("--png", type=Path, default=Path("artifacts/decode.png"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_sampling_model(base_model=MODEL).model
    decoders = Decoders.of(model)
    machine = measure_machine()
    print(
        f"machine: {machine.matmul_gflops:.0f} GFLOP/s fp32 matmul (MKL {machine.mkl_gflops:.0f}, "
        f"oneDNN {machine.onednn_gflops:.0f}), {machine.read_gbps:.1f} GB/s read, "
        f"{machine.threads} threads, load {machine.load_before}",
        flush=True,
    )
    points = []
    for batch in (int(b) for b in args.batches.split(",")):
        point = curve_point(model, decoders, machine, batch, args)
        points.append(point)
        print(
            f"batch {batch:3d}: transformers {point.hf_ms:6.1f} ms  lean F.linear {point.linear_ms:6.1f} ms  "
            f"oneDNN plain {point.plain_ms:6.1f} ms  reordered (default) {point.lean_ms:6.1f} ms  "
            f"roofline {point.roofline_ms:5.1f} ms  ({point.roofline_ms / point.lean_ms:.0%} of roofline)",
            flush=True,
        )
    parts = breakdown(model, decoders, 32, args)
    print(f"where the time goes at batch 32 (lean step {parts.step_ms:.1f} ms):")
    for name in ("layer_matmuls", "lm_head", "attention", "sampling"):
        value = getattr(parts, f"{name}_ms")
        print(f"  {name:14s} {value:7.1f} ms  {value / parts.step_ms:5.0%}")
    print(f"  {'rest':14s} {parts.rest_ms:7.1f} ms  {parts.rest_ms / parts.step_ms:5.0%}")
    print(
        f"  F.linear products: step {parts.linear_step_ms:.1f} ms, layer products {parts.linear_layer_matmuls_ms:.1f} ms"
    )
    print(
        f"  oneDNN plain weights: step {parts.plain_step_ms:.1f} ms, layer products {parts.plain_layer_matmuls_ms:.1f} ms"
    )
    print(
        f"  (reordered, as 210 separate products: {parts.separate_matmuls_ms:.1f} ms; "
        f"with gate and up separate, 150 products: {parts.gate_up_separate_matmuls_ms:.1f} ms)"
    )
    llama = (
        llama_cpp_curve(model, [p.batch for p in points], machine.threads, args) if args.llama_cpp else None
    )
    if llama is not None:
        for kv_cache in ("F16", "F32"):
            run = llama[f"kv_{kv_cache.lower()}"]
            for batch, ms in run["curve_ms"].items():
                envsuite_ms = next(p.lean_ms for p in points if p.batch == batch)
                print(
                    f"llama.cpp ({kv_cache} KV) batch {batch:3d}: {ms:6.1f} ms per step (envsuite {envsuite_ms:6.1f} ms)"
                )
            print(
                f"llama.cpp ({kv_cache} KV) one request at a time: {run['one_at_a_time_tokens_per_s']:.1f} tokens/s; "
                f"logits vs torch: max |diff| {run['logits_max_abs_diff']:.2e}, same argmax {run['same_argmax']}"
            )
    result = {
        "model": MODEL,
        "machine": asdict(machine),
        "load_after": load_average(),
        "host": platform.node(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
        "curve": [asdict(p) for p in points],
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
