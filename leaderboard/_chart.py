"""The per-env chart (mean reward with CI whiskers), drawn with matplotlib's Agg backend as SVG and PNG."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._stats import KeySummary

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_ROW_INCH = 0.32
_MIN_PANEL_INCH = 1.2


@dataclass(frozen=True)
class ChartFiles:
    """The chart written twice: SVG for the page, PNG for people and tools that want a bitmap."""

    svg: Path
    png: Path


def row_labels(entries: list[KeySummary]) -> list[str]:
    """``model`` (``vs partner``), numbered when one env holds several keys of the same model."""
    base = [e.key.model + (f" vs {e.key.partner}" if e.key.partner else "") for e in entries]
    seen: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for label in base:
        counts[label] += 1
    out = []
    for label in base:
        seen[label] += 1
        out.append(f"{label} #{seen[label]}" if counts[label] > 1 else label)
    return out


def write_chart(board: Leaderboard, out_dir: Path, stem: str = "chart") -> ChartFiles:
    """Draw one panel per env version; returns the paths of ``<stem>.svg`` and ``<stem>.png``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    by_env: dict[str, list[KeySummary]] = defaultdict(list)
    for entry in board.entries:
        by_env[entry.key.versioned_env_id].append(entry)
    envs = sorted(by_env) or ["(no results)"]
    heights = [max(_MIN_PANEL_INCH, _ROW_INCH * (len(by_env.get(env, [])) + 2)) for env in envs]
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ChartFiles(out_dir / f"{stem}.svg", out_dir / f"{stem}.png")
    # Model names are data: no mathtext parsing of "$", text drawn as paths in the SVG, fixed
    # hash salt and no date so the same board gives the same file.
    with matplotlib.rc_context(
        {"text.parse_math": False, "svg.fonttype": "path", "svg.hashsalt": "envsuite"}
    ):
        fig, axes = plt.subplots(
            len(envs), 1, figsize=(8.0, sum(heights)), gridspec_kw={"height_ratios": heights}, squeeze=False
        )
        try:
            for ax, env in zip(axes[:, 0], envs, strict=True):
                _draw_panel(ax, env, by_env.get(env, []), board.confidence)
            fig.tight_layout()
            fig.savefig(files.svg, format="svg", metadata={"Date": None})
            fig.savefig(files.png, format="png", dpi=110, metadata={"Software": None})
        finally:
            plt.close(fig)
    return files


def _draw_panel(ax: Axes, env: str, entries: list[KeySummary], confidence: float) -> None:
    ax.set_title(env, loc="left", fontsize=10)
    if not entries:
        ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    means = [e.reward.mean for e in entries]
    err_lo = [e.reward.mean - e.reward.lo for e in entries]
    err_hi = [e.reward.hi - e.reward.mean for e in entries]
    ys = list(range(len(entries)))
    ax.errorbar(means, ys, xerr=[err_lo, err_hi], fmt="o", color="#1f5fa8", ecolor="#7aa6d6", capsize=3)
    ax.set_yticks(ys, row_labels(entries), fontsize=8)
    ax.invert_yaxis()
    lo, hi = entries[0].reward_range
    ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
    ax.set_xlabel(f"mean reward ({round(confidence * 100)}% bootstrap CI)", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
