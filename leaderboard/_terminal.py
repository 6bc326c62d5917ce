"""Terminal views: rich tables of the per-key rows, the overall ranking and the ratings."""

from __future__ import annotations

import itertools
import json

from rich.markup import escape
from rich.table import Table

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._stats import Estimate


def fmt_estimate(est: Estimate | None, digits: int = 3) -> str:
    if est is None:
        return "-"
    return f"{est.mean:.{digits}f} [{est.lo:.{digits}f}, {est.hi:.{digits}f}]"


def fmt_sampling(sampling: str) -> str:
    """``{"temperature":0.7,"top_p":1}`` -> ``temperature=0.7 top_p=1``."""
    try:
        values = json.loads(sampling)
    except json.JSONDecodeError:
        return sampling
    if not isinstance(values, dict):
        return sampling
    return " ".join(f"{k}={v}" for k, v in values.items())


def fmt_seeds(seeds: str) -> str:
    try:
        values = json.loads(seeds)
    except json.JSONDecodeError:
        return seeds
    if isinstance(values, list) and values and all(isinstance(v, int) for v in values):
        # Compare pairwise rather than building range(first, last): seeds can be 31-bit numbers.
        if all(b == a + 1 for a, b in itertools.pairwise(values)):
            return f"{values[0]}..{values[-1]}" if len(values) > 1 else str(values[0])
        return f"{len(values)} seeds"
    return seeds


def render_terminal(board: Leaderboard) -> Table:
    """The per-env table (one row per result key); model text is escaped for rich markup.

    Key columns that hold one value in every row move to the caption, keeping narrow terminals readable.
    """
    pct = round(board.confidence * 100)
    table = Table(title=f"envsuite leaderboard ({pct}% bootstrap CI, B={board.n_boot})")
    key_cols = {
        "env": [e.key.versioned_env_id for e in board.entries],
        "model": [e.key.model for e in board.entries],
        "partner": [e.key.partner or "-" for e in board.entries],
        "renderer": [e.key.renderer for e in board.entries],
        "sampling": [fmt_sampling(e.key.sampling) for e in board.entries],
        "seeds": [fmt_seeds(e.key.seeds) for e in board.entries],
        "version": [e.key.package_version for e in board.entries],
    }
    shown = [n for n, vals in key_cols.items() if n in ("env", "model") or len(set(vals)) > 1]
    constant = [f"{n}={vals[0]}" for n, vals in key_cols.items() if n not in shown and vals]
    if constant:
        table.caption = escape("all rows: " + ", ".join(constant))
    for name in shown:
        table.add_column(name, overflow="fold", min_width=10 if name in ("env", "model") else None)
    table.add_column("n", justify="right")
    for name in ("reward", "success", "normalized"):
        table.add_column(name, justify="right")
    for i, entry in enumerate(board.entries):
        table.add_row(
            *(escape(key_cols[name][i]) for name in shown),
            str(entry.n_samples),
            fmt_estimate(entry.reward),
            fmt_estimate(entry.success),
            fmt_estimate(entry.normalized),
        )
    return table


def render_overall(board: Leaderboard) -> Table:
    envs = ", ".join(board.shared_envs) or "none shared by every model"
    table = Table(title=f"overall: mean normalized reward over {escape(envs)}")
    for name in ("rank", "model", "renderer", "sampling", "version", "score"):
        table.add_column(name, overflow="fold")
    for row in board.overall:
        e = row.entrant
        table.add_row(
            str(row.rank),
            escape(e.model),
            escape(e.renderer),
            escape(fmt_sampling(e.sampling)),
            escape(e.package_version),
            fmt_estimate(row.score),
        )
    return table


def render_ratings(board: Leaderboard) -> Table:
    table = Table(title="openskill ratings (PlackettLuce; ordinal = mu - 3 sigma)")
    for name in ("pool", "player", "ordinal", "mu", "sigma", "matches"):
        table.add_column(name, overflow="fold")
    for r in board.ratings:
        table.add_row(
            escape(r.pool),
            escape(r.player),
            f"{r.ordinal:.2f}",
            f"{r.mu:.2f}",
            f"{r.sigma:.2f}",
            str(r.matches),
        )
    return table
