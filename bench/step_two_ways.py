"""The lean decode step two fixed ways on SmolLM2-135M, alternating in one process: every product on
envsuite's panels in the captured native step, and oneDNN's reordered weights on torch's step.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/step_two_ways.py 1,2,4,8,16,32,64 ROUNDS STEPS

Prints the median ms per step (forward + each row's token) of each way per batch size, their ratio and
the load average. A quick check of the native step on a CPU kind (no calibration, no llama.cpp):
bench/decode.py is the whole comparison.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

os.environ.setdefault("ENVSUITE_KERNEL_SETUP", "wait")

from envsuite.backends.local import load_sampling_model
from envsuite.engine.kernels import kernel_plan, lay_out_frozen_linears, native_kernels
from envsuite.engine.sampling import RowSampling, choose_tokens, make_generator
from envsuite.engine.sampling._kv_batch import KVBatch, prefill
from envsuite.engine.sampling._llama_decode import LlamaDecoder, llama_decoder

MODEL = "smollm2-135m-instruct"
WAYS = (("panels/captured", "panels", True), ("reordered/torch", "onednn-reordered", False))
"""(name, forced product path, native step kernels)."""


@dataclass
class Way:
    model: Any
    decoder: LlamaDecoder | None
    native: bool


def build(path: str, native: bool) -> Way:
    model = load_sampling_model(base_model=MODEL).model
    lay_out_frozen_linears(model, kernel_plan(model, native=native, path=path))
    return Way(model, llama_decoder(model, native=native), native)


def step_ms(way: Way, batch: KVBatch, rows: list[RowSampling]) -> float:
    started = time.perf_counter()
    logits = batch.step(way.model, way.decoder)
    batch.pending_B = choose_tokens(logits, rows, native=way.native).tokens_B
    return 1000 * (time.perf_counter() - started)


def point(ways: dict[str, Way], rows_B: int, rounds: int, steps: int) -> dict[str, float]:
    """Median ms per step of each way at ``rows_B`` rows, the ways alternating round by round."""
    generator = torch.Generator().manual_seed(rows_B)
    prompts = [
        torch.randint(100, 40000, (40 + (i * 5) % 17,), generator=generator).tolist() for i in range(rows_B)
    ]
    batches = {name: prefill(way.model, prompts, False).batch for name, way in ways.items()}
    rows = [RowSampling(1.0, -1, 1.0, make_generator(i)) for i in range(rows_B)]
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            step_ms(way, batches[name], rows)  # the first step after the other way's is not timed
            times[name] += [step_ms(way, batches[name], rows) for _ in range(steps)]
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    batches = [int(b) for b in sys.argv[1].split(",")]
    rounds, steps = int(sys.argv[2]), int(sys.argv[3])
    print(native_kernels().describe(), flush=True)
    ways = {name: build(path, native) for name, path, native in WAYS}
    print("rows", *ways, "ratio", "load", sep="\t", flush=True)
    with torch.inference_mode():
        for rows_B in batches:
            ms = point(ways, rows_B, rounds, steps)
            first, second = ms.values()
            cells = [f"{m:.2f}" for m in ms.values()]
            print(rows_B, *cells, f"{first / second:.3f}", f"{os.getloadavg()[0]:.2f}", sep="\t", flush=True)


if __name__ == "__main__":
    main()
