"""``envsuite play``: one episode in the terminal, showing each observation, action and reward."""

from __future__ import annotations

import argparse
import asyncio

from rich.console import Console

from envsuite import RendererConfig, make_env
from envsuite.cli._args import parse_env_args
from envsuite.cli._policies import build_policy
from envsuite.core import InitialObservationOverflow
from envsuite.registration import spec


async def _play(args: argparse.Namespace, console: Console) -> float:
    env_spec = spec(args.env_id)
    model = args.model or (args.policy if args.policy not in ("random", "human") else None)
    renderer = RendererConfig(model_name=model) if model else RendererConfig()
    tokenizer = renderer.build().tokenizer
    policy = build_policy(
        args.policy,
        renderer=renderer,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
    )
    env = make_env(env_spec.id, seed=args.seed, renderer=renderer, **parse_env_args(args.env_arg))
    start = await env.initial_observation()
    if isinstance(start, InitialObservationOverflow):
        console.print(f"the prompt does not fit ({start.prompt_tokens} > {start.max_tokens} tokens)")
        return 0.0
    ob, stop = start
    seen: list[int] = []
    total = 0.0
    for turn in range(1, 10_000):
        tokens = ob.to_ints()
        console.rule(f"observation (turn {turn})")
        # Show only what is new when the observation extends the last one (the usual multi-turn case).
        new = tokens[len(seen) :] if tokens[: len(seen)] == seen else tokens
        console.print(tokenizer.decode(new), markup=False, highlight=False)
        action = await policy(ob, stop)
        console.rule("action")
        console.print(tokenizer.decode(action.tokens), markup=False, highlight=False)
        result = await env.step(action.tokens)
        total += result.reward
        seen = tokens + list(action.tokens)
        console.print(f"[bold]reward[/] {result.reward:+.3f}   metrics {dict(result.metrics)}")
        ob, stop = result.next_observation, result.next_stop_condition
        if result.episode_done:
            reason = result.stop_reason.value if result.stop_reason else "?"
            console.rule(f"episode over: stop/{reason}, return {total:+.3f}")
            break
    return total


def run_play(args: argparse.Namespace) -> int:
    asyncio.run(_play(args, Console()))
    return 0
