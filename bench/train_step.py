"""Benchmark: local-backend training step (forward_backward + optim_step) against this machine's fp32 peak.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py [--model smollm2-135m-instruct] [--batch 8]
        [--seq 256] [--steps 3] [--threads 2] [--modes lora,full] [--kernels onednn,f-linear]

The script restarts itself under jemalloc with envsuite's settings, as the ``envsuite`` command does
(``ENVSUITE_ALLOCATOR=system`` keeps the system allocator). Each mode runs with the training model's
linear layers through oneDNN (the default,
``LocalServiceClient(onednn_products=True)``) and through ``F.linear``, one after the other. The peak
is the better of MKL's and oneDNN's 2048^3 fp32 rates (``bench/_machine.py``).

FLOPs per step: ``6 * N * T`` with ``N`` the base model's parameters (embedding lookup excluded, the
unembedding included) and ``T`` the tokens in the batch: the forward costs ``2NT``; the backward needs
the activation gradients through every layer (``2NT``) and, for full fine-tuning, the weight gradients
(``2NT``). LoRA skips most weight gradients but the measured step still runs close to ``6NT`` of work
(the frozen layers' activation gradients plus adapter matmuls), so both modes are reported against
``6NT``; for LoRA the figure is the useful-work rate a full fine-tune would need for the same step.
Attention score FLOPs (``~12 * layers * width * T * seq``, about 2% here) are not counted.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tinker import types

from envsuite.backends.local import LocalServiceClient
from envsuite.engine import jemalloc_loaded, reexec_under_jemalloc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import measure_machine


@dataclass(frozen=True)
class StepTiming:
    mode: str
    kernels: str
    tokens: int
    seconds: float
    flops: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9


def make_batch(batch: int, seq: int, vocab: int, seed: int = 0) -> list[types.Datum]:
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(batch):
        tokens = rng.integers(100, vocab, size=seq + 1)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
                loss_fn_inputs={
                    "target_tokens": types.TensorData.from_numpy(tokens[1:]),
                    "weights": types.TensorData.from_numpy(np.ones(seq, dtype=np.float32)),
                },
            )
        )
    return data


def counted_params(model: str) -> int:
    """Parameters that take part in matmuls: all but the input embedding (tied: counted once, as unembedding)."""
    from safetensors import safe_open

    from envsuite.models import resolve_model

    total = 0
    shapes: dict[str, int] = {}
    with safe_open(str(resolve_model(model).path / "model.safetensors"), framework="pt") as handle:
        for key in handle.keys():  # noqa: SIM118 (safe_open handles are not iterable)
            shapes[key] = int(np.prod(handle.get_slice(key).get_shape()))
            total += shapes[key]
    untied = "lm_head.weight" in shapes
    return total - (shapes.get("model.embed_tokens.weight", 0) if untied else 0)


def time_mode(
    service: LocalServiceClient, model: str, mode: str, data: list[types.Datum], steps: int
) -> StepTiming:
    kernels = "onednn" if service.onednn_products else "f-linear"
    if mode == "lora":
        client = service.create_lora_training_client(model, rank=32, seed=0).result()
    else:
        client = service.create_training_client(model, full_finetune=True).result()
    adam = types.AdamParams(learning_rate=1e-5)
    tokens = sum(d.model_input.length for d in data)
    client.forward_backward(data, "cross_entropy").result()  # warm-up (allocator, lazy init)
    client.optim_step(adam).result()
    start = time.perf_counter()
    for _ in range(steps):
        client.forward_backward(data, "cross_entropy")
        last = client.optim_step(adam)
    last.result()
    seconds = (time.perf_counter() - start) / steps
    flops = 6.0 * counted_params(model) * tokens
    client.close()
    return StepTiming(mode, kernels, tokens, seconds, flops)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="lora,full")
    parser.add_argument("--kernels", default="onednn,f-linear")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    machine = measure_machine()
    peak = machine.matmul_gflops
    print(f"allocator: {'jemalloc' if jemalloc_loaded() else 'the system malloc'}")
    print(
        f"fp32 matmul peak ({args.threads} threads, 2048^3): {peak:.1f} GFLOP/s "
        f"(MKL {machine.mkl_gflops:.0f}, oneDNN {machine.onednn_gflops:.0f}); load {machine.load_before}"
    )
    data = make_batch(args.batch, args.seq, vocab=49152)
    for mode in args.modes.split(","):
        for kernels in args.kernels.split(","):
            service = LocalServiceClient(onednn_products=kernels == "onednn")
            timing = time_mode(service, args.model, mode, data, args.steps)
            print(
                f"{mode:>4} {kernels:>8}: {timing.tokens} tokens/step, {timing.seconds:.2f} s/step, "
                f"{timing.tokens_per_s:.0f} tokens/s, {timing.gflops:.1f} GFLOP/s = {timing.gflops / peak:.0%} of peak",
                flush=True,
            )
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS: {rss_gib:.2f} GiB")


if __name__ == "__main__":
    # Under jemalloc, as the envsuite command runs (envsuite.engine._memory): with glibc's allocator a
    # step here took twice as long (docs/benchmarks.md). ENVSUITE_ALLOCATOR=system keeps glibc.
    reexec_under_jemalloc(sys.orig_argv[1:])
    main()
