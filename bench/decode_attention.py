"""One-token attention of a decode step: envsuite's native kernel against torch's SDPA, on padded batches.

    .venv/bin/python -P bench/decode_attention.py [--rows 32] [--repeats 15] [--json PATH]

SmolLM2-135M's shapes (3 key/value heads of 64 floats, 3 query heads each, 30 layers, each its own
cache), fp32, all of torch's threads. Two batches:

* **bench-like**: 80 columns, every row 63-80 tokens long (left padding of up to 17), as
  bench/decode.py's prompts leave it;
* **continuous batching**: 512 columns, one row 512 tokens long and the others 40-443 (rows that
  joined a running batch later, or turns of different lengths, are padded up to the longest row);
* **in cache**: 140 columns (8 blocks of 16 and a last one of 12), no padding, one layer's cache
  read by all 30 layers: the kernel's own work, with keys and values in the CPU's caches rather than
  streamed from memory.

Per batch, the median over ``--repeats`` of the 30 layers' attention: ``torch.ops.envsuite.decode_attention``
(scores 16 keys at a time; blocks of 16 keys a row's mask covers whole are not read) and
``torch.nn.functional.scaled_dot_product_attention`` with the same boolean mask (what the lean step runs
without the native kernels). Checks that both give the same values (1e-5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _host import cpu_name, require_native_kernels

KV_HEADS, GROUP, HEAD_DIM, LAYERS = 3, 3, 64, 30


def padded_mask(lengths: list[int], columns: int) -> torch.Tensor:
    """Each row's tokens in its last ``length`` columns (left padding)."""
    mask = torch.zeros(len(lengths), columns, dtype=torch.bool)
    for row, length in enumerate(lengths):
        mask[row, columns - length :] = True
    return mask


def time_batch(mask: torch.Tensor, repeats: int, caches: int = LAYERS) -> dict[str, float]:
    """The 30 layers' attention over ``caches`` distinct caches (taken in turn)."""
    rows, columns = mask.shape
    generator = torch.Generator().manual_seed(columns)
    query = torch.randn(rows, KV_HEADS, GROUP, HEAD_DIM, generator=generator)
    distinct = [
        tuple(torch.randn(rows, KV_HEADS, columns, HEAD_DIM, generator=generator) for _ in range(2))
        for _ in range(caches)
    ]
    layers = [distinct[layer % caches] for layer in range(LAYERS)]
    scale = HEAD_DIM**-0.5
    sdpa_mask = mask[:, None, None, :]
    native = torch.ops.envsuite.decode_attention(query, *layers[0], mask, scale)
    reference = torch.nn.functional.scaled_dot_product_attention(
        query, *layers[0], attn_mask=sdpa_mask, scale=scale
    )
    torch.testing.assert_close(native, reference, rtol=1e-5, atol=1e-5)

    def run_native() -> None:
        for keys, values in layers:
            torch.ops.envsuite.decode_attention(query, keys, values, mask, scale)

    def run_sdpa() -> None:
        for keys, values in layers:
            torch.nn.functional.scaled_dot_product_attention(
                query, keys, values, attn_mask=sdpa_mask, scale=scale
            )

    times: dict[str, list[float]] = {"native": [], "sdpa": []}
    for _ in range(repeats):  # alternating, so a drift in the machine touches both alike
        for name, run in (("native", run_native), ("sdpa", run_sdpa)):
            started = time.perf_counter()
            run()
            times[name].append(1000 * (time.perf_counter() - started))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, default=Path("artifacts/decode_attention.json"))
    args = parser.parse_args()
    require_native_kernels()
    rows = args.rows
    batches = {  # name: (mask, distinct caches)
        "bench-like": (padded_mask([80 - (row * 5) % 17 for row in range(rows)], 80), LAYERS),
        "continuous batching": (padded_mask([512] + [40 + 13 * row for row in range(1, rows)], 512), LAYERS),
        "in cache": (padded_mask([140] * rows, 140), 1),
    }
    result: dict[str, Any] = {
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "rows": rows,
        "batches": {},
    }
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    for name, (mask, caches) in batches.items():
        ms = time_batch(mask, args.repeats, caches)
        live = float(mask.float().mean())
        result["batches"][name] = {"columns": mask.shape[1], "live_share": live, **ms}
        print(
            f"{name:20s} {mask.shape[1]:4d} columns, {live:4.0%} of them tokens: native {ms['native']:6.2f} ms, "
            f"SDPA {ms['sdpa']:6.2f} ms for {LAYERS} layers ({ms['sdpa'] / ms['native']:.1f}x)",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
