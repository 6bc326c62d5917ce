"""The reward curve: train and test reward per step, as a PNG (matplotlib, headless); a multi-env run's
curve also has each env's rewards, and a curriculum run each env's rung (on a second axis)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_ENV_LINES = 8
"""Envs drawn one by one on a multi-env run's curve (more would not be readable)."""


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

    labels = list(
        dict.fromkeys(_keyed(rows, "by_env/", "/reward/mean") + _keyed(rows, "test/by_env/", "/reward/mean"))
    )
    rungs = _keyed(rows, "curriculum/", "/rung")
    wide = bool(labels or rungs)
    fig, ax = plt.subplots(figsize=(9, 5) if wide else (7, 4), dpi=110)
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
    plotted = _per_env(ax, rows, labels) or plotted
    handles, names = ax.get_legend_handles_labels()
    if rungs:
        twin = ax.twinx()
        highest = 1.0
        for label in rungs[:MAX_ENV_LINES]:
            steps, values = _series(rows, f"curriculum/{label}/rung")
            twin.plot(steps, values, drawstyle="steps-post", linewidth=2, alpha=0.6, label=f"{label} rung")
            highest = max([highest, *values])
        twin.set_ylim(-0.3, highest + 0.7)
        twin.set_ylabel("difficulty rung (curriculum)")
        from matplotlib.ticker import MaxNLocator

        twin.yaxis.set_major_locator(MaxNLocator(integer=True))
        more_handles, more_names = twin.get_legend_handles_labels()
        handles, names = handles + more_handles, names + more_names
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if plotted:
        ax.legend(handles, names, loc="best", fontsize="small" if wide else None)
    else:
        ax.text(0.5, 0.5, "no finished episodes yet", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def _keyed(rows: Sequence[dict[str, object]], prefix: str, suffix: str) -> list[str]:
    """The labels of keys ``<prefix><label><suffix>`` in ``rows``, in first-seen order."""
    found: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith(prefix) and key.endswith(suffix):
                found.setdefault(key[len(prefix) : -len(suffix)], None)
    return list(found)


def _per_env(ax: Axes, rows: Sequence[dict[str, object]], labels: list[str]) -> bool:
    """Each env's train reward (thin lines) and test reward (hollow markers) of a multi-env run."""
    plotted = False
    for label in labels[:MAX_ENV_LINES]:
        steps, values = _series(rows, f"by_env/{label}/reward/mean")
        color = None
        if steps:
            (line,) = ax.plot(steps, values, linewidth=1, alpha=0.7, label=f"{label} train")
            color = line.get_color()
        steps, values = _series(rows, f"test/by_env/{label}/reward/mean")
        if steps:
            ax.plot(
                steps,
                values,
                linestyle="none",
                marker="o",
                fillstyle="none",
                color=color,
                label=None if color else f"{label} test",
            )
        plotted = True
    return plotted


def plot_reward_curve(rows: Sequence[dict[str, object]], path: Path, title: str) -> Path:
    """Write the curve to ``path``; steps without a value (no eval that step) are skipped."""
    import matplotlib.pyplot as plt

    fig = reward_curve_figure(rows, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
