"""Async off-policy vs synchronous GRPO on a multi-turn preset: training wall-clock to the same held-out reward.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/async_vs_sync.py --preset guess-the-number --steps 12 \\
        --save-every 3 --eval-games 48 [--max-staleness 1] [--only sync|async|eval] --out runs/async_vs_sync

Both runs are the preset's config (same seed, data order, model, LoRA, learning rate), one synchronous
and one with ``async_max_steps_off_policy`` (``--max-staleness``), each for ``--steps`` steps in a child
process, saving the sampling weights every ``--save-every`` steps next to the training clock so far:
the sum of the steps' phase times (``time/*``; no evaluation runs during training, so async sampling
gets no free time). Afterwards one evaluator plays the same ``--eval-games`` held-out games (test split,
the preset's sampling settings, fixed seeds) with the base model and every saved checkpoint of both runs.
The *target* is the lower of the two runs' best held-out rewards, so both reach it; each run's time to
reward is the clock of its first checkpoint at or above it. ``--only`` runs one part (a rerun skips
what is already in ``--out``), so a long measurement can be split over several sittings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_CHILD = """
import sys
from envsuite.engine import reexec_under_jemalloc
reexec_under_jemalloc(sys.orig_argv[1:])  # as the envsuite command does: jemalloc where installed
from envsuite.trainers import TrainConfig, run_training
run_training(TrainConfig.from_json(sys.argv[1]), show_progress=False)
"""


def config_for(args: argparse.Namespace, mode: str) -> Any:
    from envsuite.trainers import load_preset

    changes: dict[str, Any] = {
        "n_steps": args.steps,
        "save_every": args.save_every,
        "eval_every": 0,
        "n_test_groups": 0,
        "n_transcripts": 0,
        "seed": args.seed,
    }
    if mode == "async":
        changes["async_max_steps_off_policy"] = args.max_staleness
    return load_preset(args.preset).config(str(args.out / mode), **changes)


def train(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One training run in a child process; its checkpoints with the training clock at each."""
    from envsuite.trainers import read_metrics

    config = config_for(args, mode)
    load = list(os.getloadavg())
    started = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", _CHILD, config.to_json()], env=env, check=True)
    wall = time.perf_counter() - started
    log_dir = Path(config.log_dir)
    rows = read_metrics(log_dir / "metrics.jsonl")
    step_s = [sum(float(v) for k, v in r.items() if k.startswith("time/")) for r in rows]  # type: ignore[arg-type]
    saved = [json.loads(line) for line in (log_dir / "checkpoints.jsonl").read_text().splitlines()]
    return {
        "mode": mode,
        "wall_s": wall,
        "load_before": load,
        "load_after": list(os.getloadavg()),
        "step_s": step_s,
        "train_reward": [r.get("reward/mean") for r in rows],
        "staleness_mean": [r.get("async/staleness_mean") for r in rows],
        "util_sampler": [r.get("util/sampler") for r in rows],
        "util_trainer": [r.get("util/trainer") for r in rows],
        "checkpoints": [
            {"step": c["step"], "train_s": sum(step_s[: c["step"]]), "path": c["sampler_path"]} for c in saved
        ],
    }


def held_out(args: argparse.Namespace, path: str | None) -> float:
    """Mean env reward over the held-out games, with the weights at ``path`` (None: the base model)."""
    from envsuite import RendererConfig, episode_seed, make_env
    from envsuite.backends.local import LocalSamplingClient
    from envsuite.completers import SamplingTokenCompleter
    from envsuite.rollouts import RolloutLimits, do_single_rollout

    config = config_for(args, "sync")
    client = (
        LocalSamplingClient.load(base_model=config.model)
        if path is None
        else LocalSamplingClient.load(model_path=path)
    )
    renderer = RendererConfig(model_name=config.model, renderer_name=config.renderer_name)
    limits = RolloutLimits(max_turns=config.max_turns)

    async def one(index: int) -> float:
        seed = episode_seed(args.seed, "held-out", index)
        policy = SamplingTokenCompleter(
            client, max_tokens=config.max_tokens, temperature=config.temperature, seed=seed
        )
        env = make_env(config.env_id, seed=seed, split="test", renderer=renderer, **config.env_kwargs)
        trajectory = await do_single_rollout(policy, env, limits)
        return sum(t.reward for t in trajectory.transitions)

    async def every() -> list[float]:
        return list(await asyncio.gather(*(one(i) for i in range(args.eval_games))))

    rewards = asyncio.run(every())
    client.close()
    return sum(rewards) / len(rewards)


def report(args: argparse.Namespace) -> dict[str, Any]:
    runs = {mode: json.loads((args.out / f"{mode}.json").read_text()) for mode in ("sync", "async")}
    evaluated = json.loads((args.out / "eval.json").read_text())
    base = evaluated["base"]
    for mode, run in runs.items():
        for checkpoint in run["checkpoints"]:
            checkpoint["held_out"] = evaluated[mode][str(checkpoint["step"])]
    target = min(max(c["held_out"] for c in run["checkpoints"]) for run in runs.values())
    summary: dict[str, Any] = {"preset": args.preset, "base_held_out": base, "target": target, "runs": {}}
    for mode, run in runs.items():
        reached = next((c for c in run["checkpoints"] if c["held_out"] >= target), None)
        summary["runs"][mode] = {
            "time_to_target_s": None if reached is None else reached["train_s"],
            "step_reached": None if reached is None else reached["step"],
            "final_held_out": run["checkpoints"][-1]["held_out"],
            "train_s": sum(run["step_s"]),
            "median_step_s": sorted(run["step_s"])[len(run["step_s"]) // 2],
            "checkpoints": [
                (c["step"], round(c["train_s"], 1), round(c["held_out"], 3)) for c in run["checkpoints"]
            ],
            "load_before": run["load_before"],
        }
    a, s = summary["runs"]["async"]["time_to_target_s"], summary["runs"]["sync"]["time_to_target_s"]
    summary["async_over_sync"] = None if a is None or not s else a / s
    plot(summary, runs, args.out / "async_vs_sync.png")
    return summary


def plot(summary: dict[str, Any], runs: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for mode, color in (("sync", "tab:blue"), ("async", "tab:green")):
        points = [(0.0, summary["base_held_out"])] + [
            (c["train_s"], c["held_out"]) for c in runs[mode]["checkpoints"]
        ]
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", color=color, label=mode)
    ax.axhline(summary["target"], color="k", linestyle=":", label=f"target {summary['target']:.3f}")
    ax.set_xlabel("training wall-clock (s)")
    ax.set_ylabel("held-out reward")
    ratio = summary["async_over_sync"]
    title = f"{summary['preset']}: async / sync time to target = {ratio:.2f}" if ratio else summary["preset"]
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="guess-the-number")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--eval-games", type=int, default=48)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["sync", "async", "eval"], default=None)
    parser.add_argument("--out", type=Path, default=Path("runs/async_vs_sync"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in ("sync", "async"):
        done = args.out / f"{mode}.json"
        if args.only in (None, mode) and not done.exists():
            done.write_text(json.dumps(train(args, mode), indent=1) + "\n")
            print(f"{mode}: trained", flush=True)
    if args.only in (None, "eval"):
        evaluated: dict[str, Any] = {"base": held_out(args, None), "sync": {}, "async": {}}
        for mode in ("sync", "async"):
            for checkpoint in json.loads((args.out / f"{mode}.json").read_text())["checkpoints"]:
                evaluated[mode][str(checkpoint["step"])] = held_out(args, checkpoint["path"])
        (args.out / "eval.json").write_text(json.dumps(evaluated, indent=1) + "\n")
        summary = report(args)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
