"""Multi-adapter sampling: the cost of 2 and 4 LoRA adapters' rows in one batch against 1 (issue 59).

One sampling engine serves SmolLM2-135M-Instruct's base weights and ``--adapters`` LoRA adapters of it
(rank ``--rank`` on every attention and MLP projection and the LM head, as a default Tinker LoRA client
trains; random factors). A fixed total batch of ``--rows`` single-sample requests (distinct prompts of
``--prompt-tokens`` tokens, ``--new-tokens`` each, no stop, temperature 1) is split evenly among 1, 2
and 4 adapters, two ways:

  (a) together   - every adapter's requests submitted at once: the engine decodes all rows in one step
                   (with one adapter: its merged weights, the single-adapter fast path; with several: the
                   base products once plus each row's low-rank terms);
  (b) one after another - each adapter's requests alone on its merged weights, the next adapter's when
                   they are done (what sampling the policies separately costs).

Each way runs ``--repeats`` times after a warm-up; the median wall time is reported as new tokens/s
(prefill included) and ms per decode position (wall time / new tokens).

Memory: every adapter's single-adapter steps and prefills run one merged model's weights (laid out
once) with that adapter's own factors for the mixed steps: a merged copy of SmolLM2's projections is
~0.5 GB, and four did not fit beside the other sessions on the 2-core box. Distinct weights of the same
shapes cost the same to stream (none fits in cache), so the timings are those of distinct adapters;
``--distinct-merged`` builds one merged model per adapter.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/multi_adapter.py`` (options: ``--rows 8 16``,
``--adapters 1 2 4``, ``--rank``, ``--new-tokens``, ``--prompt-tokens``, ``--repeats``, ``--threads``: torch's
intra-op threads; on a box shared beyond its cores one thread keeps each operation from waiting on a
descheduled partner thread, which otherwise dominates the small products of a decode step).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

# The bench times the measured plan, so on a new build it waits for the kernels' build and calibration
# (a first use otherwise samples through F.linear while they run in the background: not what it times).
os.environ.setdefault("ENVSUITE_KERNEL_SETUP", "wait")

from envsuite.engine.sampling import EngineConfig, EngineRequest, EngineResult, SamplingEngine
from envsuite.engine.weights import LoraFactors, LoraModule, LoraSpec, load_base_model, unmerged_model
from envsuite.models import resolve_model

MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Row:
    rows: int
    adapters: int
    way: str
    seconds: float
    new_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.rows * self.new_tokens / self.seconds

    @property
    def ms_per_position(self) -> float:
        return 1000 * self.seconds / self.new_tokens


def synthetic_adapter(
    base: PreTrainedModel, rank: int, seed: int, merge: bool
) -> tuple[PreTrainedModel | None, LoraFactors]:
    """A random LoRA adapter of ``base`` on every default target (attention, MLP, LM head): its merged
    model (new tensors for the adapted layers only; None unless ``merge``) and its factors."""
    generator = torch.Generator().manual_seed(seed)
    targets = tuple(LoraSpec(rank=rank, seed=seed).target_modules())
    memo: dict[int, object] = {id(p): p for p in base.parameters()}
    memo.update({id(b): b for b in base.buffers()})
    modules: dict[str, LoraModule] = {}
    scale = 32 / rank
    with torch.no_grad():
        for name, layer in base.named_modules():
            if not (isinstance(layer, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets):
                continue
            weight = layer.weight.detach()
            a = torch.randn(rank, weight.shape[1], generator=generator) / weight.shape[1] ** 0.5
            b = torch.randn(weight.shape[0], rank, generator=generator) * 1e-3
            modules[name] = LoraModule(a=a, b=b, scale=scale, base_weight=weight)
            if not merge:
                continue
            merged = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            merged.weight = torch.nn.Parameter(torch.addmm(weight, b, a, alpha=scale), requires_grad=False)
            memo[id(layer)] = merged
    if not merge:
        return None, LoraFactors(modules)
    model = copy.deepcopy(base, memo)
    model.config.tie_word_embeddings = False
    return model.eval(), LoraFactors(modules)


def requests(rows: int, prompt_tokens: int, new_tokens: int, vocab: int) -> list[EngineRequest]:
    generator = torch.Generator().manual_seed(rows)
    return [
        EngineRequest(
            prompt_T=tuple(int(t) for t in torch.randint(1000, vocab, (prompt_tokens,), generator=generator)),
            num_samples=1,
            max_tokens=new_tokens,
            temperature=1.0,
            seed=i,
        )
        for i in range(rows)
    ]


def run(engine: SamplingEngine, parts: Sequence[tuple[int, list[EngineRequest]]], together: bool) -> float:
    """Wall seconds to sample every part (variant, requests): all at once, or part after part."""
    engine.clear_prefix_cache()
    start = time.perf_counter()
    pending: list[concurrent.futures.Future[EngineResult]] = []
    for variant, part in parts:
        futures = [engine.submit(request, lambda result: result, variant=variant) for request in part]
        if together:
            pending += futures
        else:
            for future in futures:
                future.result()
    for future in pending:
        future.result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--distinct-merged", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch's intra-op threads (default: torch's)"
    )
    parser.add_argument(
        "--no-captured-step",
        action="store_true",
        help="one-adapter steps op by op too, as the mixed step runs (how much of its cost is that)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    base = load_base_model(str(resolve_model(MODEL).path))
    base.requires_grad_(False)
    vocab = int(base.get_input_embeddings().weight.shape[0])
    adapters = [
        synthetic_adapter(base, args.rank, seed, merge=seed == 0 or args.distinct_merged)
        for seed in range(max(args.adapters))
    ]
    merged0, factors0 = adapters[0]
    assert merged0 is not None
    # As a session's shared engine: the base's adapted layers on a copy of their weights (laid out).
    shared = frozenset(id(p) for p in base.parameters())
    config = EngineConfig(captured_step=not args.no_captured_step)
    engine = SamplingEngine(unmerged_model(merged0, factors0), lambda tokens: "", config, shared)
    variants = [engine.add_variant(merged or merged0, factors, shared) for merged, factors in adapters]
    print(f"{MODEL}, rank-{args.rank} adapters, {args.new_tokens} new tokens per row, prompts of "
          f"{args.prompt_tokens}, median of {args.repeats}")  # fmt: skip
    print(f"{'rows':>4} {'adapters':>8} {'way':<18} {'tokens/s':>9} {'ms/position':>11}")
    results: list[Row] = []
    for rows in args.rows:
        for count in args.adapters:
            per = rows // count
            all_requests = requests(rows, args.prompt_tokens, args.new_tokens, vocab)
            parts = [(variants[k], all_requests[k * per : (k + 1) * per]) for k in range(count)]
            ways = [("together", True)] + ([("one after another", False)] if count > 1 else [])
            for way, together in ways:
                run(engine, parts, together)  # warm-up (and the mixed step's factors laid out)
                seconds = statistics.median(run(engine, parts, together) for _ in range(args.repeats))
                row = Row(rows, count, way, seconds, args.new_tokens)
                results.append(row)
                print(f"{rows:>4} {count:>8} {way:<18} {row.tokens_per_s:>9.0f} {row.ms_per_position:>11.1f}")
    print(
        f"mixed steps run: {engine.variants.mixed_steps}; torch threads: {torch.get_num_threads()}; "
        f"captured one-adapter steps: {config.captured_step}"
    )
    engine.close()


if __name__ == "__main__":
    main()
