"""Multi-turn rollouts with and without the prefix cache: 20-turn twenty questions on SmolLM2.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/multiturn.py [--episodes 16] [--turns 20]
        [--max-tokens 48] [--rounds 1] [--max-kv-mib 256] [--model smollm2-135m-instruct]
        [--json artifacts/multiturn.json]

Every turn of a twenty questions episode sends the whole conversation so far (the previous prompt,
the reply, the answer): without reuse the sampler prefills it all again, so an episode of ``T`` turns
prefills O(T^2) tokens. The engine's prefix cache keeps each finished row's KV and prefills only the
new tail (docs/backend_sampling.md).

Two sampling clients over the same weights, one with the prefix cache off (``prefix_cache_bytes=0``)
and one with the default cache, play the same ``--episodes`` test-split episodes (same seeds), all in
flight at once, each episode with its own seeded completer (so its sampling seeds do not depend on
scheduling). ``--rounds`` alternates the two; every round runs in a fresh process of its own. Reports sampled tokens per second, prompt tokens run
through prefill passes, the cache's counters, and whether the two runs sampled the same tokens with the
same logprobs (goal: >= 3x tokens/s, same tokens, logprobs within 1e-3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from envsuite import RendererConfig, episode_seed, make_env
from envsuite.backends.local import EngineConfig, LocalSamplingClient, load_sampling_model
from envsuite.completers import SamplingTokenCompleter
from envsuite.rollouts import RolloutLimits, do_single_rollout

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import load_average

ENV = "twenty_questions"


@dataclass(frozen=True)
class ModeRun:
    mode: str
    seconds: float
    sampled_tokens: int
    prefilled_tokens: int
    turns: int
    load_before: tuple[float, float, float]

    @property
    def tokens_per_s(self) -> float:
        return self.sampled_tokens / self.seconds


Episode = list[tuple[list[int], list[float]]]


class _PrefillCounter:
    """Counts prompt tokens in prefill passes (every forward pass embeds its tokens first)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.tokens = 0
        embeddings = model.get_input_embeddings()
        assert isinstance(embeddings, torch.nn.Module)
        embeddings.register_forward_pre_hook(self._hook)

    def _hook(self, _module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if args[0].shape[1] > 1:
            self.tokens += int(args[0].numel())


async def play(
    client: LocalSamplingClient, args: argparse.Namespace, counter: _PrefillCounter, mode: str
) -> tuple[ModeRun, list[Episode]]:
    renderer = RendererConfig(model_name=args.model)
    seeds = [episode_seed(args.seed, ENV, i) for i in range(args.episodes)]

    async def one(index: int, seed: int) -> Episode:
        policy = SamplingTokenCompleter(
            client, max_tokens=args.max_tokens, temperature=args.temperature, seed=1000 + index
        )
        env = make_env(ENV, seed=seed, split="test", renderer=renderer)
        trajectory = await do_single_rollout(policy, env, RolloutLimits(max_turns=args.turns))
        return [(list(t.ac.tokens), list(t.ac.maybe_logprobs or [])) for t in trajectory.transitions]

    load = load_average()
    counter.tokens = 0
    started = time.perf_counter()
    episodes = await asyncio.gather(*(one(i, s) for i, s in enumerate(seeds)))
    seconds = time.perf_counter() - started
    sampled = sum(len(tokens) for episode in episodes for tokens, _ in episode)
    turns = sum(1 for episode in episodes for tokens, _ in episode if tokens)
    return ModeRun(mode, seconds, sampled, counter.tokens, turns, load), list(episodes)


def compare(reference: list[Episode], other: list[Episode]) -> dict[str, Any]:
    same_episodes = sum(
        [tokens for tokens, _ in a] == [tokens for tokens, _ in b]
        for a, b in zip(reference, other, strict=True)
    )
    diffs = [
        max((abs(x - y) for x, y in zip(la, lb, strict=True)), default=0.0)
        for a, b in zip(reference, other, strict=True)
        for (ta, la), (tb, lb) in zip(a, b, strict=False)
        if ta == tb
    ]
    return {
        "episodes": len(reference),
        "episodes_with_same_tokens": same_episodes,
        "max_logprob_diff": max(diffs, default=0.0),
    }


MODES = {"no cache": {"prefix_cache_bytes": 0}, "prefix cache": {}}


def run_mode(args: argparse.Namespace) -> None:
    """One round of one mode in this (fresh) process; writes the run, episodes and counters as JSON."""
    budget = int(args.max_kv_mib * 2**20) or None
    config = EngineConfig(max_kv_bytes=budget, **MODES[args.mode])
    loaded = load_sampling_model(base_model=args.model)
    client = LocalSamplingClient(loaded.model, loaded.tokenizer, args.model, config=config)
    counter = _PrefillCounter(loaded.model)
    # Warm-up (first forward passes, lazy imports) outside the timing.
    warm = argparse.Namespace(**{**vars(args), "episodes": 2, "turns": 2, "seed": args.seed + 1})
    asyncio.run(play(client, warm, counter, args.mode))
    run, episodes = asyncio.run(play(client, args, counter, args.mode))
    out = {
        "run": asdict(run),
        "episodes": episodes,
        "prefix_cache": asdict(client.prefix_cache_stats()),
        "kv": asdict(client.kv_stats()),
    }
    client.close()
    args.json.write_text(json.dumps(out) + "\n")


def _round(args: argparse.Namespace, mode: str, scratch: Path) -> dict[str, Any]:
    # Each round in a fresh process: no round inherits the heap, threads or caches of another (a round
    # run after a long one in the same process measured up to ~25% slower, docs/benchmarks.md).
    out = scratch / "round.json"
    argv = [sys.executable, "-P", __file__, "--mode", mode, "--json", str(out)]
    for name in ("model", "episodes", "turns", "max_tokens", "temperature", "seed", "max_kv_mib"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    subprocess.run(argv, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    result["run"]["load_before"] = tuple(result["run"]["load_before"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1, help="alternating off/on rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-kv-mib",
        type=float,
        default=EngineConfig.max_kv_bytes / 2**20 if EngineConfig.max_kv_bytes else 0,
        help="both engines' KV budget for the running batch (EngineConfig.max_kv_bytes); 0: no budget",
    )
    parser.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=Path("artifacts/multiturn.json"))
    args = parser.parse_args()
    if args.mode is not None:
        run_mode(args)
        return
    runs: dict[str, list[ModeRun]] = {mode: [] for mode in MODES}
    outputs: dict[str, list[Episode]] = {}
    last: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for mode in MODES:
                last[mode] = _round(args, mode, Path(scratch))
                run = ModeRun(**last[mode]["run"])
                runs[mode].append(run)
                outputs[mode] = [[(t, lp) for t, lp in episode] for episode in last[mode]["episodes"]]
                print(
                    f"round {round_index} {mode:12s} {run.seconds:8.1f} s  {run.tokens_per_s:7.1f} sampled tok/s  "
                    f"{run.sampled_tokens} sampled, {run.prefilled_tokens} prefilled, {run.turns} turns, "
                    f"load {run.load_before}",
                    flush=True,
                )
    stats = last["prefix cache"]["prefix_cache"]
    kv = {mode: last[mode]["kv"] for mode in MODES}
    speed = {mode: statistics.median(r.tokens_per_s for r in mode_runs) for mode, mode_runs in runs.items()}
    same = compare(outputs["no cache"], outputs["prefix cache"])
    speedup = speed["prefix cache"] / speed["no cache"]
    print(
        f"prefix cache / no cache: {speedup:.2f}x sampled tokens/s (goal >= 3x); {same}; cache {stats}; kv {kv}"
    )
    result = {
        "args": vars(args) | {"json": str(args.json)},
        "runs": {
            mode: [asdict(r) | {"tokens_per_s": r.tokens_per_s} for r in rs] for mode, rs in runs.items()
        },
        "speedup": speedup,
        "same": same,
        "prefix_cache": stats,
        "kv": kv,
        "load_after": load_average(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
