"""Long generations: the engine's in-place KV cache against transformers' concatenating ``DynamicLayer``.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/kv_cache.py [--new-tokens 1024] [--requests 32]

Workload: ``--requests`` concurrent single-sample requests (different short prompts), ``--new-tokens``
new tokens each (no stop), temperature 1, SmolLM2-135M fp32 through the local sampling engine. Two
ways, each in its own child process, one after the other:

* ``in-place``: the engine as shipped (``GrowableLayer``: keys/values are views of buffers with room;
  a new token is written into the room);
* ``concat``: the same engine with the layer's append and row selection swapped back to
  ``DynamicLayer``'s (every decode step concatenates the token to the whole cache, a copy of every
  cached position).

Prints seconds and new tokens per second for each, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

MODEL = "smollm2-135m-instruct"


def run_one(layer: str, requests: int, new_tokens: int) -> dict[str, float]:
    import tinker
    import torch
    from transformers.cache_utils import DynamicLayer

    from envsuite.backends.local import LocalSamplingClient, load_sampling_model
    from envsuite.engine.sampling import _kv_cache_layer

    if layer == "concat":

        def select_rows(self: DynamicLayer, index: torch.Tensor) -> None:
            assert self.keys is not None and self.values is not None
            self.keys = self.keys.index_select(0, index)
            self.values = self.values.index_select(0, index)

        _kv_cache_layer.GrowableLayer.update = DynamicLayer.update  # type: ignore[method-assign]
        _kv_cache_layer.GrowableLayer.select_rows = select_rows  # type: ignore[method-assign,assignment]
    loaded = load_sampling_model(base_model=MODEL)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL)
    prompts = [
        loaded.tokenizer.encode(f"Write a long story number {i} about a cat named {i * 7}.")
        for i in range(requests)
    ]
    params = tinker.SamplingParams(max_tokens=new_tokens, temperature=1.0, stop=[], seed=1)

    async def sample_all() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(client.sample(tinker.ModelInput.from_ints(p), 1, params) for p in prompts))
        return time.perf_counter() - started

    seconds = asyncio.run(sample_all())
    client.close()
    return {"seconds": seconds, "tokens_per_s": requests * new_tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument(
        "--layer", choices=["in-place", "concat"], help="run one way here (the parent uses it)"
    )
    args = parser.parse_args()
    if args.layer:
        print(json.dumps(run_one(args.layer, args.requests, args.new_tokens)))
        return
    results = {}
    for layer in ("concat", "in-place"):
        command = [sys.executable, "-P", __file__, "--layer", layer]
        command += ["--new-tokens", str(args.new_tokens), "--requests", str(args.requests)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[layer] = json.loads(out.strip().splitlines()[-1])
        print(
            f"{layer:9s} {results[layer]['seconds']:8.1f} s  {results[layer]['tokens_per_s']:7.1f} tok/s",
            flush=True,
        )
    ratio = results["in-place"]["tokens_per_s"] / results["concat"]["tokens_per_s"]
    print(f"{args.requests} requests x {args.new_tokens} new tokens: in-place / concat = {ratio:.2f}x")


if __name__ == "__main__":
    main()
