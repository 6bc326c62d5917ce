"""Harness overhead of ``envsuite bench``: its time against a bare rollout loop on the same episodes.

Both sides play the same test-split episodes (same env, seeds, model, sampling settings and number of
episodes in flight) with the same local sampler; the bare loop calls ``make_env`` + ``do_single_rollout``
directly. ``envsuite bench`` is timed with each runner (``--runners``): ``direct`` (the default for
envsuite models: envsuite plays the episodes, journals each one, writes each env as an Inspect log and
imports it into the leaderboard) and ``inspect`` (an Inspect eval set: provider, solver, scorer, a log
flush per sample, the import). ``--repeats`` rounds alternate the sides; the medians are reported.
Goal: bench takes at most 1.2x the bare loop's time. The script restarts itself under jemalloc with
envsuite's settings, as the ``envsuite`` command does.

With ``--inspect-floor`` it also times Inspect alone on the same number of samples: a task whose
solver and scorer do nothing (no env, no model call), once flushing the log after every sample (what
``envsuite bench`` does, so a killed run loses only the samples in flight) and once with Inspect's
default buffer. That is the cost no harness built on Inspect's per-sample machinery can go below.

With ``--first-episode`` it also times ``envsuite bench --model MODEL --envs ENV --episodes 1`` as a
fresh child process, from launch to exit (imports, model load, one episode, log, leaderboard import):
an upper bound on the time from command to first episode (goal <= 10 s for tiny-random).

Usage::

    .venv/bin/python -P bench/eval_overhead.py [--model smollm2-135m-instruct] [--env arithmetic]
        [--episodes 64] [--max-tokens 32] [--runners direct,inspect] [--repeats 3] [--first-episode]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tinker

from envsuite import RendererConfig, make_env
from envsuite.backends import make_service_client
from envsuite.core import Observation, StopCondition, TokenCompleter, TokensWithLogprobs
from envsuite.engine import jemalloc_loaded, reexec_under_jemalloc
from envsuite.evals import BenchConfig, episode_seeds, run_bench
from envsuite.evals._provider import local_model
from envsuite.rollouts import RolloutLimits, do_single_rollout


@dataclass(frozen=True)
class Timing:
    label: str
    seconds: float
    episodes: int
    sampled_tokens: int
    """Tokens the model sampled on that side (equal on both sides: the same episodes were played)."""

    @property
    def episodes_per_second(self) -> float:
        return self.episodes / self.seconds


class _BenchSeededCompleter(TokenCompleter):
    """Samples each turn as the bench does: every request seeded with the bench's seed (the envsuite
    Inspect provider passes ``GenerateConfig.seed`` unchanged), so both sides sample the same tokens for
    the same prompts and play the same episodes."""

    def __init__(self, client: Any, max_tokens: int, temperature: float, seed: int) -> None:
        self.client, self.max_tokens, self.temperature, self.seed = client, max_tokens, temperature, seed
        self.sampled_tokens = 0

    async def __call__(
        self, model_input: Observation, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        params = tinker.SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, stop=stop, seed=self.seed
        )
        sequence = (await self.client.sample(model_input, 1, params)).sequences[0]
        self.sampled_tokens += len(sequence.tokens)
        stop_reason = "length" if sequence.stop_reason == "length" else "stop"
        return TokensWithLogprobs(list(sequence.tokens), sequence.logprobs, stop_reason=stop_reason)


async def _bare_loop(args: argparse.Namespace) -> Timing:
    renderer = RendererConfig(model_name=args.model)
    client = local_model(args.model).sampling_client  # the same engine the Inspect provider uses
    policy = _BenchSeededCompleter(client, args.max_tokens, args.temperature, args.seed)
    gate = asyncio.Semaphore(args.in_flight)

    async def one(seed: int) -> None:
        async with gate:
            env = make_env(args.env, seed=seed, split="test", renderer=renderer)
            await do_single_rollout(policy, env, RolloutLimits())

    seeds = episode_seeds(args.env, args.episodes, args.seed)
    started = time.perf_counter()
    await asyncio.gather(*(one(s) for s in seeds))
    return Timing("bare loop", time.perf_counter() - started, args.episodes, policy.sampled_tokens)


def _bench(args: argparse.Namespace, runner: str) -> Timing:
    with tempfile.TemporaryDirectory() as scratch:
        config = BenchConfig(
            model=args.model,
            env_ids=(args.env,),
            episodes=args.episodes,
            seed=args.seed,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            log_root=f"{scratch}/logs",
            db=f"{scratch}/board.sqlite",
            display="none",
            max_samples=args.in_flight,
            runner=runner,
        )
        started = time.perf_counter()
        report = run_bench(config)
        seconds = time.perf_counter() - started
        if not report.completed or report.episodes_added != args.episodes:
            raise RuntimeError(f"bench did not complete: {report}")
        sampled = sum(_output_tokens(path) for path in report.log_paths)
    return Timing(f"envsuite bench --runner {runner}", seconds, args.episodes, sampled)


def _output_tokens(log_path: str) -> int:
    from inspect_ai.log import read_eval_log

    stats = read_eval_log(log_path, header_only=True).stats
    return sum(usage.output_tokens for usage in stats.model_usage.values())


def _inspect_floor(args: argparse.Namespace, log_buffer: int | None) -> Timing:
    """Inspect alone: ``args.episodes`` samples through a do-nothing solver and scorer."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, Scorer, Target, mean, scorer
    from inspect_ai.solver import Generate, Solver, TaskState, solver

    @solver
    def do_nothing() -> Solver:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            return state

        return solve

    @scorer(metrics=[mean()])
    def zero() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value=0.0)

        return score

    task = Task(
        dataset=[Sample(input=str(i)) for i in range(args.episodes)], solver=do_nothing(), scorer=zero()
    )
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        inspect_eval(
            task, model="mockllm/model", log_dir=scratch, display="none", max_samples=args.in_flight,
            log_format="eval", log_buffer=log_buffer,
        )  # fmt: skip
        seconds = time.perf_counter() - started
    label = f"inspect alone (log_buffer={log_buffer or 'default'})"
    return Timing(label, seconds, args.episodes, 0)


def command_to_first_episode(args: argparse.Namespace) -> float:
    """Seconds from launching ``envsuite bench`` (one episode, fresh process) to its exit."""
    envsuite = str(Path(sys.executable).with_name("envsuite"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            envsuite, "bench", "--model", args.model, "--envs", args.env, "--episodes", "1",
            "--max-tokens", str(args.max_tokens), "--log-dir", f"{scratch}/logs", "--db", f"{scratch}/board.sqlite",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        return time.perf_counter() - started


def _cold(args: argparse.Namespace) -> None:
    """Empty the sampler's prefix cache: each side starts cold (the sides play the same prompts, so a
    side timed after another would find every prompt's KV cached and skip its prefills)."""
    local_model(args.model).sampling_client.clear_prefix_cache()


def _median(timings: list[Timing]) -> Timing:
    first = timings[0]
    return Timing(
        first.label, statistics.median(t.seconds for t in timings), first.episodes, first.sampled_tokens
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runners", default="direct,inspect", help="bench runners to time")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds (medians reported)")
    parser.add_argument("--first-episode", action="store_true", help="also time command to first episode")
    parser.add_argument(
        "--inspect-floor", action="store_true", help="also time Inspect with a do-nothing task"
    )
    args = parser.parse_args()
    # Under jemalloc, as the envsuite command runs (envsuite.engine._memory).
    reexec_under_jemalloc(sys.orig_argv[1:])
    runners = [r for r in args.runners.split(",") if r]
    print(f"load average before: {os.getloadavg()}")
    print(f"allocator: {'jemalloc' if jemalloc_loaded() else 'the system malloc'}")
    make_service_client("local")  # import cost outside the timings
    local_model(args.model)  # load the model once, outside both timings
    # Warm-ups: one-time costs (Inspect's lazy imports, first forward passes) stay out of the timings.
    asyncio.run(_bare_loop(argparse.Namespace(**{**vars(args), "episodes": 4})))
    for runner in runners:
        _bench(argparse.Namespace(**{**vars(args), "episodes": 2}), runner)
    if args.inspect_floor:
        _inspect_floor(argparse.Namespace(**{**vars(args), "episodes": 2}), 1)
    rounds: dict[str, list[Timing]] = {}
    for _ in range(args.repeats):
        _cold(args)
        rounds.setdefault("bare", []).append(asyncio.run(_bare_loop(args)))
        for runner in runners:
            _cold(args)
            rounds.setdefault(runner, []).append(_bench(args, runner))
    bare = _median(rounds.pop("bare"))
    benches = [_median(timings) for timings in rounds.values()]
    floors = [_inspect_floor(args, buffer) for buffer in (1, None)] if args.inspect_floor else []
    print(f"{args.model} on {args.env}: {args.episodes} episodes, {args.in_flight} in flight, "
          f"median of {args.repeats} alternating rounds")  # fmt: skip
    for timing in (bare, *benches, *floors):
        print(
            f"  {timing.label:34s} {timing.seconds:8.2f} s  {timing.episodes_per_second:8.2f} episodes/s"
            f"  {timing.sampled_tokens:7d} sampled tokens"
        )
    for bench in benches:
        print(f"  {bench.label} / bare = {bench.seconds / bare.seconds:.2f}x (goal <= 1.2x)")
    for floor in floors:
        print(f"  bare + {floor.label} = {(bare.seconds + floor.seconds) / bare.seconds:.2f}x the bare loop")
    if args.first_episode:
        print(f"  command to first episode (fresh process, to exit): {command_to_first_episode(args):.2f} s")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
