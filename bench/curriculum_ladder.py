"""The adaptive-curriculum result: a curriculum run against its fixed-difficulty twin, rung by rung.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/curriculum_ladder.py --curriculum runs/results/chain-sum-curriculum \\
        --fixed runs/results/chain-sum-fixed [--env reasoning_gym/chain_sum] [--quantity correct] \\
        [--reach 0.5] [--png docs/img/results_curriculum_ladder.png]

Both runs evaluate held-out sets of the same rungs (``eval_rungs``) at the same steps, on the same
problems. For the first and the last evaluation it prints each run's held-out ``quantity`` per rung with
95% bootstrap intervals, and the highest rung each reaches (held-out ``quantity`` >= ``--reach``); the
figure shows those, and the curriculum's rung and both runs' train success over the steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envsuite.trainers import Estimate, episode_value, mean_ci, read_eval_rows, read_metrics


def ladder(log_dir: Path, env: str, quantity: str, step: int) -> dict[int, Estimate]:
    """Held-out ``quantity`` per rung at evaluation ``step`` (its per-rung sets)."""
    values: dict[int, list[float]] = {}
    for row in read_eval_rows(log_dir):
        rung = row.get("rung")
        if row.get("env") == env and isinstance(rung, int) and row.get("step") == step:
            values.setdefault(rung, []).append(episode_value(row, quantity))
    return {rung: mean_ci(v) for rung, v in sorted(values.items())}


def eval_steps(log_dir: Path) -> list[int]:
    return sorted({int(r["step"]) for r in read_eval_rows(log_dir) if isinstance(r.get("step"), int)})  # type: ignore[call-overload]


def reached(estimates: dict[int, Estimate], threshold: float) -> int | None:
    """The highest rung whose held-out mean is at least ``threshold`` (None: no rung)."""
    return max((rung for rung, e in estimates.items() if e.mean >= threshold), default=None)


def table(runs: dict[str, dict[int, Estimate]], threshold: float) -> str:
    rungs = sorted({r for estimates in runs.values() for r in estimates})
    lines = ["| run | " + " | ".join(f"rung {r}" for r in rungs) + f" | highest rung >= {threshold:.2f} |"]
    lines.append("|---|" + "---:|" * len(rungs) + "---:|")
    for name, estimates in runs.items():
        cells = [str(estimates[r]) if r in estimates else "-" for r in rungs]
        top = reached(estimates, threshold)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'none' if top is None else top} |")
    return "\n".join(lines)


def figure(
    runs: dict[str, dict[int, Estimate]],
    curves: dict[str, list[dict[str, object]]],
    env: str,
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110)
    width = 0.8 / max(len(runs), 1)
    for index, (name, estimates) in enumerate(runs.items()):
        rungs = list(estimates)
        means = [estimates[r].mean for r in rungs]
        errors = [
            [estimates[r].mean - estimates[r].low for r in rungs],
            [estimates[r].high - estimates[r].mean for r in rungs],
        ]
        left.bar(
            [r + (index - (len(runs) - 1) / 2) * width for r in rungs],
            means,
            width,
            yerr=errors,
            capsize=3,
            label=name,
        )
    left.set_xlabel("difficulty rung of the held-out set")
    left.set_ylabel("held-out success (95% bootstrap CI)")
    left.set_title("held-out success per rung")
    left.legend(fontsize="small")
    left.grid(axis="y", alpha=0.3)
    key = f"curriculum/{env}/rung"
    for name, rows in curves.items():
        steps = [int(r["step"]) for r in rows if isinstance(r.get("success"), int | float)]  # type: ignore[call-overload]
        right.plot(
            steps,
            [float(r["success"]) for r in rows if isinstance(r.get("success"), int | float)],
            label=f"{name}: train success",
        )  # type: ignore[arg-type]
    twin = right.twinx()
    for name, rows in curves.items():
        points = [(int(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), int | float)]  # type: ignore[call-overload, arg-type]
        if points:
            twin.plot(
                *zip(*points, strict=True),
                drawstyle="steps-post",
                color="black",
                linewidth=2,
                label=f"{name}: rung",
            )
    twin.set_ylabel("rung trained on")
    right.set_xlabel("step")
    right.set_ylabel("train success (mean over rollouts)")
    right.set_title("training")
    handles = right.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    right.legend(handles[0] + more[0], handles[1] + more[1], fontsize="small", loc="upper left")
    right.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--curriculum", required=True, type=Path)
    parser.add_argument("--fixed", required=True, type=Path)
    parser.add_argument("--env", default="reasoning_gym/chain_sum")
    parser.add_argument("--quantity", default="correct")
    parser.add_argument("--reach", type=float, default=0.5)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args()
    steps = eval_steps(args.curriculum)
    if steps != eval_steps(args.fixed) or len(steps) < 2:
        print(f"the runs must evaluate at the same steps (two at least): {steps} vs {eval_steps(args.fixed)}")
        return 1
    runs = {
        f"base model (step {steps[0]})": ladder(args.curriculum, args.env, args.quantity, steps[0]),
        f"fixed rung, step {steps[-1]}": ladder(args.fixed, args.env, args.quantity, steps[-1]),
        f"curriculum, step {steps[-1]}": ladder(args.curriculum, args.env, args.quantity, steps[-1]),
    }
    print(table(runs, args.reach))
    if args.png is not None:
        curves = {
            "curriculum": read_metrics(args.curriculum / "metrics.jsonl"),
            "fixed": read_metrics(args.fixed / "metrics.jsonl"),
        }
        figure(runs, curves, args.env, args.png, f"{args.env}: adaptive curriculum vs fixed rung, same steps")
        print(f"figure: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
