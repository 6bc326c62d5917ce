"""The native panel products of a decode step, alone: SmolLM2-135M's 30 layers, every weight its own copy.

    .venv/bin/python -P bench/panel_products.py [--rows 1,8,32,64] [--repeats 12] [--json PATH]

What the products of one decode step cost with envsuite's panels kernel (``torch.ops.envsuite.panel_linear``)
when every weight comes from memory, as in a real step: the three product shapes of a SmolLM2 layer that
are not fused away (576 -> 3072 gate/up, 1536 -> 576 down, 576 -> 960 query/key/value), 30 distinct
random weights each, all 90 products in layer order, median ms over ``--repeats``. Also the same products
on one weight per shape used 30 times ("hot": it stays in the caches), which bounds what the kernel does
when memory keeps up. The gap between the two is time spent waiting on memory, which the weights'
read-ahead and the threads' work sharing (``_native_products.cpp``) are there to hide.

Before/after figures for a change to the kernel come from running this script once per build of the
native library (``ENVSUITE_NATIVE_CACHE`` pointing at each build), alternating, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _host import cpu_name, require_native_kernels

SHAPES = ((3072, 576), (576, 1536), (960, 576))
"""(out_features, in_features) of SmolLM2-135M's gate/up, down and query/key/value products."""
LAYERS = 30


def step_ms(weights: dict[tuple[int, int], list[torch.Tensor]], rows: int, repeats: int) -> float:
    inputs = {shape: torch.randn(rows, shape[1]) for shape in SHAPES}
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for layer in range(LAYERS):
            for shape in SHAPES:
                torch.ops.envsuite.panel_linear(inputs[shape], weights[shape][layer], shape[0], None)
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,8,32,64")
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--json", type=Path, default=Path("artifacts/panel_products.json"))
    args = parser.parse_args()
    require_native_kernels()
    generator = torch.Generator().manual_seed(0)
    cold = {
        shape: [
            torch.ops.envsuite.pack_panels(torch.randn(*shape, generator=generator)) for _ in range(LAYERS)
        ]
        for shape in SHAPES
    }
    hot = {shape: [weights[0]] * LAYERS for shape, weights in cold.items()}
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    result: dict[str, object] = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "rows": {}}
    for rows in (int(r) for r in args.rows.split(",")):
        ms = {"cold": step_ms(cold, rows, args.repeats), "hot": step_ms(hot, rows, args.repeats)}
        result["rows"][str(rows)] = ms  # type: ignore[index]
        print(f"{rows:3d} rows: {ms['cold']:6.2f} ms from memory, {ms['hot']:6.2f} ms hot", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
