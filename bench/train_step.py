"""Benchmark: local-backend training step (forward_backward + optim_step) against this machine's fp32 peak.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py [--model smollm2-135m-instruct] [--batch 8]
        [--seq 256] [--steps 3] [--threads 2] [--modes lora,full]

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
import time
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types

from envsuite.backends.local import LocalServiceClient


@dataclass(frozen=True)
class StepTiming:
    mode: str
    tokens: int
    seconds: float
    flops: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """Best observed fp32 GFLOP/s of one large square matmul."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.matmul(a, b)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = max(best, 2 * size**3 / (time.perf_counter() - start) / 1e9)
    return best


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
    return StepTiming(mode, tokens, seconds, flops)


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peak = matmul_peak_gflops()
    print(f"fp32 matmul peak ({args.threads} threads, 2048^3): {peak:.1f} GFLOP/s")
    service = LocalServiceClient()
    data = make_batch(args.batch, args.seq, vocab=49152)
    for mode in args.modes.split(","):
        timing = time_mode(service, args.model, mode, data, args.steps)
        print(
            f"{mode:>4}: {timing.tokens} tokens/step, {timing.seconds:.2f} s/step, "
            f"{timing.tokens_per_s:.0f} tokens/s, {timing.gflops:.1f} GFLOP/s = {timing.gflops / peak:.0%} of peak"
        )
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS: {rss_gib:.2f} GiB")


if __name__ == "__main__":
    main()
