"""The reward curve: train and test reward per step, as a PNG (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def _series(rows: Sequence[dict[str, object]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for row in rows:
        step, value = row.get("step"), row.get(key)
        if isinstance(step, int) and isinstance(value, int | float):
            steps.append(step)
            values.append(float(value))
    return steps, values


def plot_reward_curve(rows: Sequence[dict[str, object]], path: Path, title: str) -> Path:
    """Write the curve to ``path``; steps without a value (no eval that step) are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    plotted = False
    for key, label, style in (
        ("reward/mean", "train reward (mean over rollouts)", "-o"),
        ("test/reward/mean", "test reward", "-s"),
        ("success", "train success", ":"),
    ):
        steps, values = _series(rows, key)
        if steps:
            ax.plot(steps, values, style, label=label, markersize=3)
            plotted = True
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if plotted:
        ax.legend(loc="best")
    else:
        ax.text(0.5, 0.5, "no finished episodes yet", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
