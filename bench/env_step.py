"""Per-step overhead of each catalog env, excluding the policy: render + step (parse, grade, next prompt).

For every available env it plays many episodes with scripted replies and reports, in microseconds:

* ``reset``: median ``initial_observation`` (render and tokenize the first prompt);
* ``step``: median ``step`` (decode the reply, grade it or answer it, build the next observation);
* ``tokenize only``: median cost of just encoding the same prompt text and decoding the same reply with
  the tokenizer, the floor any token-level env pays.

Usage::

    .venv/bin/python bench/env_step.py [--steps 300] [--envs arithmetic math ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass

import envsuite
from envsuite import InitialObservationOverflow, RendererConfig
from envsuite.testing._episodes import PLAUSIBLE_REPLIES, text_actions


@dataclass(frozen=True)
class EnvStepTiming:
    env_id: str
    steps: int
    reset_us: float
    step_us: float
    tokenize_only_us: float

    @property
    def step_over_tokenize(self) -> float:
        return self.step_us / self.tokenize_only_us if self.tokenize_only_us else float("inf")


async def _time_env(env_id: str, steps: int, renderer: RendererConfig) -> EnvStepTiming:
    tokenizer = renderer.build().tokenizer
    actions = text_actions(renderer.build(), PLAUSIBLE_REPLIES)
    resets: list[float] = []
    step_times: list[float] = []
    tokenize_times: list[float] = []
    seed = 0
    while len(step_times) < steps:
        env = envsuite.make_env(env_id, seed=seed, split="test", renderer=renderer)
        seed += 1
        t0 = time.perf_counter()
        start = await env.initial_observation()
        resets.append(time.perf_counter() - t0)
        if isinstance(start, InitialObservationOverflow):
            continue
        prompt = start[0].to_ints()
        for turn in range(64):
            action = actions(turn)
            t0 = time.perf_counter()
            result = await env.step(action)
            step_times.append(time.perf_counter() - t0)
            prompt_text = tokenizer.decode(prompt)
            t0 = time.perf_counter()
            tokenizer.encode(prompt_text, add_special_tokens=False)
            tokenizer.decode(action)
            tokenize_times.append(time.perf_counter() - t0)
            prompt = result.next_observation.to_ints()
            if result.episode_done:
                break
    return EnvStepTiming(
        env_id=env_id,
        steps=len(step_times),
        reset_us=statistics.median(resets) * 1e6,
        step_us=statistics.median(step_times) * 1e6,
        tokenize_only_us=statistics.median(tokenize_times) * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="steps measured per env")
    parser.add_argument("--envs", nargs="*", help="env ids (default: every available env)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="tokenizer to render with")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    env_ids = args.envs or [
        s.id for s in envsuite.registry.all_specs() if not s.unavailable and not s.deprecated
    ]
    renderer = RendererConfig(model_name=args.model)
    results = []
    print(
        f"{'env':36s} {'steps':>6s} {'reset us':>10s} {'step us':>10s} {'tokenize us':>12s} {'step/tok':>9s}"
    )
    for env_id in env_ids:
        timing = asyncio.run(_time_env(env_id, args.steps, renderer))
        results.append(timing)
        print(
            f"{env_id:36s} {timing.steps:6d} {timing.reset_us:10.1f} {timing.step_us:10.1f} "
            f"{timing.tokenize_only_us:12.1f} {timing.step_over_tokenize:9.2f}"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)


if __name__ == "__main__":
    main()
