"""The lean decode step two fixed ways on SmolLM2-135M, alternating in one process: every product on
envsuite's panels in the captured native step, and oneDNN's reordered weights on torch's step
(``bench/decode.py``'s ``reordered`` way).

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/step_two_ways.py 1,2,4,8,16,32,64 ROUNDS STEPS

Prints the median ms per step (forward + each row's token; the median of the rounds' medians) of each
way per batch size, their ratio and the load average. A quick check of the native step on a CPU kind
(no calibration, no llama.cpp): bench/decode.py is the whole comparison, and lends this script its
workload (prompts, rows, the step).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _host import cpu_name  # noqa: E402
from decode import MODEL, Way, _median_ms, _prompts, _rows, _step, build_way  # noqa: E402

from envsuite.backends.local import load_sampling_model  # noqa: E402
from envsuite.engine.kernels import kernel_plan, lay_out_frozen_linears, native_kernels  # noqa: E402
from envsuite.engine.sampling._kv_batch import prefill  # noqa: E402
from envsuite.engine.sampling._llama_decode import llama_decoder  # noqa: E402


def panels_way() -> Way:
    """Every product on the panels (forced: no calibration), the step captured in one native call."""
    model = load_sampling_model(base_model=MODEL).model
    lay_out_frozen_linears(model, kernel_plan(model, native=True, path="panels"))
    decoder = llama_decoder(model, native=True)
    assert decoder is not None
    return Way(model, decoder, None, 0.0)


def point(ways: dict[str, Way], rows_B: int, rounds: int, steps: int) -> dict[str, float]:
    """Median ms per step of each way at ``rows_B`` rows, the ways alternating round by round."""
    vocab = int(next(iter(ways.values())).model.config.vocab_size)
    prompts = _prompts(rows_B, 48, vocab, seed=rows_B)
    batches = {name: prefill(way.model, prompts, False).batch for name, way in ways.items()}
    rows = _rows(rows_B)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            step = functools.partial(_step, way.model, batches[name], way.decoder, rows)
            step()  # the first step after the other way's is not timed
            times[name].append(_median_ms(step, steps))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    batches = [int(b) for b in sys.argv[1].split(",")]
    rounds, steps = int(sys.argv[2]), int(sys.argv[3])
    print(f"CPU: {cpu_name()}; native kernels: {native_kernels().describe()}", flush=True)
    with tempfile.TemporaryDirectory() as cache:
        ways = {"panels/captured": panels_way(), "reordered/torch": build_way("reordered", Path(cache))}
    print("rows", *ways, "ratio", "load", sep="\t", flush=True)
    with torch.inference_mode():
        for rows_B in batches:
            ms = point(ways, rows_B, rounds, steps)
            first, second = ms.values()
            cells = [f"{m:.2f}" for m in ms.values()]
            print(rows_B, *cells, f"{first / second:.3f}", f"{os.getloadavg()[0]:.2f}", sep="\t", flush=True)


if __name__ == "__main__":
    main()
