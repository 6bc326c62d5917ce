"""``envsuite demo``: the main job (train briefly, bench base vs trained, rank them), or ``--quick``: the
model on the math envs with a summary. Its defaults are :class:`~envsuite.cli._demo_pipeline.DemoPlan`'s."""

from __future__ import annotations

import argparse

from envsuite.cli._args import Subparsers
from envsuite.cli._demo_pipeline import DemoPlan, run_pipeline


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite demo`` to the command's sub-parsers."""
    plan = DemoPlan()
    p = sub.add_parser(
        "demo",
        help="the main job: train the embedded model briefly, bench base vs trained, write the leaderboard",
    )
    p.add_argument("--model", default=plan.model)
    p.add_argument("--out-dir", default=plan.out_dir, help="where training runs, logs and the page go")
    p.add_argument("--train-steps", type=int, default=plan.train_steps)
    p.add_argument("--bench-episodes", type=int, default=plan.episodes, help="episodes per env per model")
    p.add_argument("--quick", action="store_true", help="only run the model on the math envs and summarize")
    p.add_argument("--episodes", type=int, default=24, help="--quick: episodes per env")
    p.add_argument("--envs", nargs="*", default=["arithmetic", "math"], help="--quick: envs to run")
    p.add_argument("--max-tokens", type=int, default=96, help="--quick: reply token limit")
    p.add_argument("--temperature", type=float, default=0.7, help="--quick: sampling temperature")
    p.add_argument("--seed", type=int, default=plan.seed)


def run(args: argparse.Namespace) -> int:
    """The quick summary with ``--quick``, else the whole demo."""
    if args.quick:
        from envsuite.cli._demo_quick import run_quick

        return run_quick(args)
    plan = DemoPlan(
        model=args.model,
        out_dir=args.out_dir,
        train_steps=args.train_steps,
        episodes=args.bench_episodes,
        seed=args.seed,
    )
    return run_pipeline(plan)
