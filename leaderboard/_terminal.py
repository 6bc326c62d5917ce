"""Terminal views: the per-key rows, the overall ranking and the ratings, fitted to the terminal's width.

Ids (env ids, model names, players) never wrap or get cut: a table is drawn only when every column fits
at its full width; otherwise each row becomes a block whose first line holds the ids and whose next
lines hold the numbers. Stored text is shown through :func:`display_text` (control characters become
visible escapes) inside :class:`rich.text.Text` objects, so neither markup nor escape sequences in a
model name ever act on the terminal.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._stats import Estimate, KeySummary
from envsuite.leaderboard._text import display_text


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


@dataclass(frozen=True)
class Column:
    name: str
    is_id: bool = False
    """Id columns go on a row block's first line in the narrow layout and are never wrapped."""
    numeric: bool = False


@dataclass(frozen=True)
class FittedTable:
    """Rows drawn as a table when it fits the console, else as one block per row (a rich renderable)."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    group_by_first_id: bool = False
    """In the narrow layout, show the first id once as a heading over the rows that share it."""

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def table_width(self) -> int:
        """Width of the table with every cell on one line (SIMPLE_HEAD box: 2 cells of padding per column)."""
        widths = [
            max([cell_len(c.name), *(cell_len(row[i]) for row in self.rows)])
            for i, c in enumerate(self.columns)
        ]
        return sum(widths) + 2 * len(widths)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.table_width() <= options.max_width:
            yield self._table()
        else:
            yield from self._blocks()

    def _table(self) -> Table:
        caption = Text(self.caption) if self.caption else None
        table = Table(title=Text(self.title), box=box.SIMPLE_HEAD, caption=caption)
        for column in self.columns:
            table.add_column(column.name, no_wrap=True, justify="right" if column.numeric else "left")
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table

    def _blocks(self) -> Iterator[Text | Padding]:
        yield Text(self.title, style="bold")
        if self.caption:
            yield Text(self.caption)
        heading = None
        for row in self.rows:
            ids = [cell for cell, c in zip(row, self.columns, strict=True) if c.is_id and cell != "-"]
            if self.group_by_first_id and ids:
                if ids[0] != heading:
                    heading = ids[0]
                    yield Text(heading, style="bold", no_wrap=True, overflow="ignore")
                ids = ids[1:]
            # overflow="ignore": an id longer than the terminal is left for the terminal to wrap, never cut.
            yield Padding(Text("  ".join(ids), no_wrap=True, overflow="ignore"), (0, 0, 0, 2))
            numbers = Table.grid(padding=(0, 2))
            rest = [(c.name, cell) for cell, c in zip(row, self.columns, strict=True) if not c.is_id]
            for _ in rest:
                numbers.add_column()
            numbers.add_row(*(Text(name, style="dim") for name, _ in rest))
            numbers.add_row(*(Text(cell) for _, cell in rest))
            yield Padding(numbers, (0, 0, 0, 4))


def _constant_columns(values: dict[str, list[str]], always: Sequence[str]) -> tuple[list[str], str]:
    """Columns that vary (plus ``always``), and a caption naming the ones that hold one value."""
    shown = [n for n, vals in values.items() if n in always or len(set(vals)) > 1]
    constant = [f"{n}={vals[0]}" for n, vals in values.items() if n not in shown and vals]
    return shown, ("all rows: " + ", ".join(constant)) if constant else ""


PASS_CAPTION = "pass@k: unbiased estimate from n plays per episode (shown as n=...), CI over episodes"


def pass_ks(board: Leaderboard) -> list[int]:
    """Every k some row reports pass@k at, in order (none when no key played its episodes K > 1 times)."""
    return sorted({v.k for entry in board.entries for v in entry.pass_at.values})


def fmt_pass(entry: KeySummary, k: int) -> str:
    """A row's pass@k with its interval and the plays per episode behind it, or ``-``."""
    found = entry.pass_at.at(k)
    if found is None:
        return "-"
    return f"{fmt_estimate(found.pass_at_k)} n={found.n}"


def render_terminal(board: Leaderboard) -> FittedTable:
    """The per-env rows (one per result key); key columns that hold one value in every row move to the caption."""
    pct = round(board.confidence * 100)
    values = {
        "env": [e.key.versioned_env_id for e in board.entries],
        "model": [e.key.model for e in board.entries],
        "partner": [e.key.partner or "-" for e in board.entries],
        "renderer": [e.key.renderer for e in board.entries],
        "sampling": [fmt_sampling(e.key.sampling) for e in board.entries],
        "seeds": [fmt_seeds(e.key.seeds) for e in board.entries],
        "version": [e.key.package_version for e in board.entries],
    }
    shown, caption = _constant_columns(values, ("env", "model"))
    ks = pass_ks(board)
    columns = (
        *(Column(n, is_id=n in ("env", "model", "partner")) for n in shown),
        Column("n", numeric=True),
        *(Column(n, numeric=True) for n in ("reward", "success", "normalized")),
        *(Column(f"pass@{k}", numeric=True) for k in ks),
    )
    rows = tuple(
        (
            *(display_text(values[n][i]) for n in shown),
            str(entry.n_samples),
            fmt_estimate(entry.reward),
            fmt_estimate(entry.success),
            fmt_estimate(entry.normalized),
            *(fmt_pass(entry, k) for k in ks),
        )
        for i, entry in enumerate(board.entries)
    )
    if ks:
        caption = "; ".join(filter(None, [caption, PASS_CAPTION]))
    title = f"envsuite leaderboard ({pct}% bootstrap CI, B={board.n_boot})"
    return FittedTable(title, columns, rows, display_text(caption), group_by_first_id=True)


def render_overall(board: Leaderboard) -> FittedTable:
    envs = ", ".join(board.shared_envs) or "none shared by every model"
    values = {
        "model": [o.entrant.model for o in board.overall],
        "renderer": [o.entrant.renderer for o in board.overall],
        "sampling": [fmt_sampling(o.entrant.sampling) for o in board.overall],
        "version": [o.entrant.package_version for o in board.overall],
    }
    shown, caption = _constant_columns(values, ("model",))
    columns = (
        Column("rank", is_id=True, numeric=True),
        *(Column(n, is_id=n == "model") for n in shown),
        Column("score", numeric=True),
    )
    rows = tuple(
        (str(o.rank), *(display_text(values[n][i]) for n in shown), fmt_estimate(o.score))
        for i, o in enumerate(board.overall)
    )
    title = display_text(f"overall: mean normalized reward over {envs}")
    return FittedTable(title, columns, rows, display_text(caption))


def render_ratings(board: Leaderboard) -> FittedTable:
    columns = (
        Column("pool", is_id=True),
        Column("player", is_id=True),
        *(Column(n, numeric=True) for n in ("ordinal", "mu", "sigma", "matches")),
    )
    rows = tuple(
        (
            display_text(r.pool),
            display_text(r.player),
            f"{r.ordinal:.2f}",
            f"{r.mu:.2f}",
            f"{r.sigma:.2f}",
            str(r.matches),
        )
        for r in board.ratings
    )
    return FittedTable("openskill ratings (PlackettLuce; ordinal = mu - 3 sigma)", columns, rows)
