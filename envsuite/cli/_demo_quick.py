"""``envsuite demo --quick``: the embedded model on the math envs, with a summary of how it did and how fast.

All episodes of an env run concurrently, so the local sampler batches them into shared forward passes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envsuite import RendererConfig, episode_seed, make_env
from envsuite.core import TokenCompleter, Trajectory
from envsuite.display import printable
from envsuite.rollouts import RolloutLimits, do_single_rollout, episode_metrics

MAX_IN_FLIGHT = 32


@dataclass(frozen=True)
class EnvSummary:
    """How a policy did on one env."""

    env_id: str
    episodes: int
    mean_reward: float
    accuracy: float
    format_rate: float
    sampled_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.sampled_tokens / self.seconds if self.seconds > 0 else 0.0


async def run_episodes(
    env_id: str,
    policy: TokenCompleter,
    *,
    episodes: int,
    seed: int,
    renderer: RendererConfig,
    progress: Progress | None = None,
) -> list[Trajectory]:
    """Play ``episodes`` test-split episodes of ``env_id`` concurrently (bounded in flight)."""
    task = progress.add_task(env_id, total=episodes) if progress else None
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def one(index: int) -> Trajectory:
        async with gate:
            env = make_env(env_id, seed=episode_seed(seed, env_id, index), split="test", renderer=renderer)
            trajectory = await do_single_rollout(policy, env, RolloutLimits(max_turns=32, timeout_s=600))
        if progress is not None and task is not None:
            progress.advance(task)
        return trajectory

    return list(await asyncio.gather(*(one(i) for i in range(episodes))))


def summarize(env_id: str, trajectories: list[Trajectory], seconds: float) -> EnvSummary:
    metrics = [episode_metrics(t) for t in trajectories]
    n = max(len(metrics), 1)
    return EnvSummary(
        env_id=env_id,
        episodes=len(metrics),
        mean_reward=sum(float(m["reward"]) for m in metrics) / n,
        accuracy=sum(float(m.get("correct", 0.0)) for m in metrics) / n,
        format_rate=sum(float(m.get("format", 0.0)) for m in metrics) / n,
        sampled_tokens=int(sum(m["ac_tokens"] for m in metrics)),
        seconds=seconds,
    )


def summary_table(title: str, summaries: list[EnvSummary]) -> Table:
    table = Table(title=escape(title))
    for column in ("env", "episodes", "mean reward", "accuracy", "format rate", "sampled tokens", "tokens/s"):
        table.add_column(column, justify="right" if column != "env" else "left")
    for s in summaries:
        table.add_row(
            s.env_id,
            str(s.episodes),
            f"{s.mean_reward:+.3f}",
            f"{s.accuracy:.1%}",
            f"{s.format_rate:.1%}",
            str(s.sampled_tokens),
            f"{s.tokens_per_second:.1f}",
        )
    return table


async def _demo(args: argparse.Namespace, console: Console) -> list[EnvSummary]:
    from envsuite.cli._policies import build_policy

    renderer = RendererConfig(model_name=args.model)
    loading = f"loading {args.model} (the first run converts the embedded GGUF once, about 20 s)..."
    console.print(printable(loading), markup=False)
    policy = build_policy(
        args.model,
        renderer=renderer,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
    )
    summaries = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for env_id in args.envs:
            started = time.perf_counter()
            trajectories = await run_episodes(
                env_id, policy, episodes=args.episodes, seed=args.seed, renderer=renderer, progress=progress
            )
            summaries.append(summarize(env_id, trajectories, time.perf_counter() - started))
    return summaries


def run_quick(args: argparse.Namespace) -> int:
    """Play ``--episodes`` of each of ``--envs`` with ``--model`` and print the summary table."""
    console = Console()
    summaries = asyncio.run(_demo(args, console))
    console.print(
        summary_table(
            printable(f"{args.model} on the math envs (test split, T={args.temperature})"), summaries
        )
    )
    return 0
