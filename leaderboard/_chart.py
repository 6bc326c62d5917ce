"""The per-env chart (normalized score with CI whiskers), drawn with matplotlib's Agg backend as SVG and PNG.

Every panel uses one scale, the normalized score in [0, 1] (0 = the env's lowest reward, 1 = its
highest), so envs with different reward ranges read alike; the axis extends past both ends so a
point at 0 or 1 is drawn whole.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._stats import KeySummary
from envsuite.leaderboard._text import display_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_ROW_INCH = 0.32
_MIN_PANEL_INCH = 1.2
X_LIMITS = (-0.06, 1.06)
"""The shared x range: [0, 1] plus room for a marker and its cap at either end."""


@dataclass(frozen=True)
class ChartFiles:
    """The chart written twice: SVG for the page, PNG for people and tools that want a bitmap."""

    svg: Path
    png: Path


def row_labels(entries: list[KeySummary]) -> list[str]:
    """``model`` (``vs partner``), numbered when one env holds several keys of the same model."""
    base = [display_text(e.key.model + (f" vs {e.key.partner}" if e.key.partner else "")) for e in entries]
    seen: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for label in base:
        counts[label] += 1
    out = []
    for label in base:
        seen[label] += 1
        out.append(f"{label} #{seen[label]}" if counts[label] > 1 else label)
    return out


# Model names are data: no mathtext parsing of "$", text drawn as paths in the SVG, fixed hash salt
# (and no date, below) so the same board gives the same file.
def _rc() -> AbstractContextManager[None]:
    import matplotlib

    return matplotlib.rc_context(
        {"text.parse_math": False, "svg.fonttype": "path", "svg.hashsalt": "envsuite"}
    )


def draw_chart(board: Leaderboard) -> Figure:
    """One panel per env version, all on the normalized [0, 1] scale (a pyplot-free figure)."""
    from matplotlib.figure import Figure

    by_env: dict[str, list[KeySummary]] = defaultdict(list)
    for entry in board.entries:
        by_env[entry.key.versioned_env_id].append(entry)
    envs = sorted(by_env) or ["(no results)"]
    heights = [max(_MIN_PANEL_INCH, _ROW_INCH * (len(by_env.get(env, [])) + 2)) for env in envs]
    with _rc():
        fig = Figure(figsize=(8.0, sum(heights)), layout="tight")
        axes = fig.subplots(len(envs), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)
        for ax, env in zip(axes[:, 0], envs, strict=True):
            _draw_panel(ax, env, by_env.get(env, []), board.confidence)
    return fig


def write_chart(board: Leaderboard, out_dir: Path, stem: str = "chart") -> ChartFiles:
    """Draw the chart; returns the paths of ``<stem>.svg`` and ``<stem>.png``."""

    out_dir.mkdir(parents=True, exist_ok=True)
    files = ChartFiles(out_dir / f"{stem}.svg", out_dir / f"{stem}.png")
    fig = draw_chart(board)
    with _rc():
        fig.savefig(files.svg, format="svg", metadata={"Date": None})
        fig.savefig(files.png, format="png", dpi=110, metadata={"Software": None})
    return files


def _draw_panel(ax: Axes, env: str, entries: list[KeySummary], confidence: float) -> None:
    ax.set_title(display_text(env), loc="left", fontsize=10)
    if not entries:
        ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    means = [e.normalized.mean for e in entries]
    err_lo = [max(0.0, e.normalized.mean - e.normalized.lo) for e in entries]
    err_hi = [max(0.0, e.normalized.hi - e.normalized.mean) for e in entries]
    ys = list(range(len(entries)))
    ax.errorbar(means, ys, xerr=[err_lo, err_hi], fmt="o", color="#1f5fa8", ecolor="#7aa6d6", capsize=3)
    ax.set_yticks(ys, row_labels(entries), fontsize=8)
    ax.set_ylim(len(entries) - 0.5, -0.5)
    ax.set_xlim(*X_LIMITS)
    ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0])
    lo, hi = entries[0].reward_range
    ax.set_xlabel(
        f"normalized score (0 = reward {lo:g}, 1 = reward {hi:g}; {round(confidence * 100)}% bootstrap CI)",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.3)
