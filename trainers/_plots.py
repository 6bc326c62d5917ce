"""The reward curve: train and test reward per step, as a PNG (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _series(rows: Sequence[dict[str, object]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for row in rows:
        step, value = row.get("step"), row.get(key)
        if isinstance(step, int) and isinstance(value, int | float):
            steps.append(step)
            values.append(float(value))
    return steps, values


def reward_curve_figure(rows: Sequence[dict[str, object]], title: str) -> Figure:
    """The curve as a matplotlib figure (the caller closes it).

    Train reward and success are measured every step and drawn as lines. Test reward is measured only
    on evaluation steps, so it is drawn as separate markers, never joined: a line between two
    evaluations would suggest measurements in between.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    plotted = False
    for key, label, style in (
        ("reward/mean", "train reward (mean over rollouts, every step)", {"linestyle": "-", "marker": "o"}),
        ("success", "train success (every step)", {"linestyle": ":", "marker": ""}),
        ("test/reward/mean", "test reward (evaluation steps only)", {"linestyle": "none", "marker": "D"}),
    ):
        steps, values = _series(rows, key)
        if steps:
            size = 6 if key.startswith("test/") else 3
            ax.plot(steps, values, label=label, markersize=size, **style)  # type: ignore[arg-type]
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
    return fig


def plot_reward_curve(rows: Sequence[dict[str, object]], path: Path, title: str) -> Path:
    """Write the curve to ``path``; steps without a value (no eval that step) are skipped."""
    import matplotlib.pyplot as plt

    fig = reward_curve_figure(rows, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
