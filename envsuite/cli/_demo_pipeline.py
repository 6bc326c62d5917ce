"""The main job (``envsuite demo``, ``make demo``): train the embedded model briefly, benchmark base vs trained, rank them.

Phases, each resumable (a second run reuses finished work):

1. ``train``: GRPO on ``arithmetic_easy`` (one-digit addition) with LoRA, a few steps;
2. ``bench``: the base model and the trained checkpoint on a catalog subset, written as Inspect logs;
3. ``rank``: the leaderboard in the terminal and as an HTML page (with a chart).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from envsuite.display import printable

DEMO_ENVS = ("arithmetic_easy", "arithmetic", "math", "twenty_questions", "tictactoe")
"""The trained env first (where the gain shows), then harder or different ones (does it carry over?)."""


@dataclass(frozen=True)
class DemoPlan:
    """The demo's settings (small enough for about 10 minutes on 2 CPU cores)."""

    model: str = "smollm2-135m-instruct"
    out_dir: str = "runs/demo"
    train_steps: int = 12
    episodes: int = 12
    envs: tuple[str, ...] = DEMO_ENVS
    seed: int = 0

    @property
    def db(self) -> str:
        return str(Path(self.out_dir) / "leaderboard.sqlite")


def _train(plan: DemoPlan, console: Console) -> str:
    from envsuite.trainers import TrainConfig, run_training

    console.rule("1/3 train: GRPO on arithmetic_easy (one-digit addition), LoRA rank 16")
    config = TrainConfig(
        env_id="arithmetic_easy",
        log_dir=str(Path(plan.out_dir) / "train"),
        model=plan.model,
        n_steps=plan.train_steps,
        batch_size=8,
        group_size=4,
        learning_rate=5e-4,
        lora_rank=16,
        max_tokens=16,
        save_every=plan.train_steps,
        eval_every=plan.train_steps,
        n_test_groups=16,
        seed=plan.seed,
    )
    result = run_training(config)
    if result.last_checkpoint is None:
        raise RuntimeError(f"training ended without a checkpoint: {result.message}")
    console.print(
        printable(f"trained {result.steps_completed} steps; reward curve: {result.plot_path}"), markup=False
    )
    return result.last_checkpoint.sampler_path


def _bench(plan: DemoPlan, model: str, label: str, console: Console) -> None:
    from envsuite.evals import BenchConfig, run_bench

    config = BenchConfig(
        model=model,
        env_ids=plan.envs,
        episodes=plan.episodes,
        seed=plan.seed,
        max_tokens=64,
        temperature=0.7,
        log_root=str(Path(plan.out_dir) / "bench"),
        db=plan.db,
        label=label,
        # 32 episodes in flight instead of the bench's 64: as fast here (five envs of 12 episodes; the
        # sampler's KV budget caps its batch below 64 rows anyway) and the demo's peak memory stays under
        # its 3 GB goal (bench/memory.py: 2.93 GB in 75 s, against 3.06 GB in 76 s with 64).
        max_samples=32,
    )
    report = run_bench(config)
    text = f"{label}: {report.episodes_added} new episode(s); logs in {report.log_dir}"
    console.print(printable(text), markup=False)


def _rank(plan: DemoPlan, console: Console) -> Path:
    from envsuite import catalog_reward_ranges
    from envsuite.leaderboard import (
        ResultStore,
        build_leaderboard,
        render_overall,
        render_terminal,
        write_html,
    )

    console.rule("3/3 rank")
    store = ResultStore(plan.db)
    try:
        ranges = catalog_reward_ranges(key.versioned_env_id for key in store.keys(plan.envs))
        board = build_leaderboard(store, env_ids=list(plan.envs), catalog_ranges=ranges)
        console.print(render_terminal(board))
        console.print(render_overall(board))
        report = write_html(Path(plan.out_dir) / "leaderboard", board)
    finally:
        store.close()
    return report.index


def run_pipeline(plan: DemoPlan) -> int:
    """Train, bench base and trained, rank: the three phases of ``plan``."""
    console = Console()
    started = time.perf_counter()
    checkpoint = _train(plan, console)
    console.rule("2/3 bench: base vs trained on " + ", ".join(plan.envs))
    _bench(plan, plan.model, plan.model, console)
    _bench(plan, checkpoint, f"{plan.model}+grpo", console)
    page = _rank(plan, console)
    minutes = (time.perf_counter() - started) / 60
    console.print(printable(f"leaderboard page: {page}   (whole demo: {minutes:.1f} min)"), markup=False)
    return 0
