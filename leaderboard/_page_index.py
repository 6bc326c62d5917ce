"""The index page: overall ranking, the model x env matrix, filters, per-key results, games, chart.

Sections are built server-side as escaped HTML (the page reads without JavaScript); the shipped
script only sorts, filters, shows the matrix tooltip and opens episode lists.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from envsuite import family_order
from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._compare import ALL_POOLS, HeadToHead, MatrixCell
from envsuite.leaderboard._html_parts import (
    ci_text,
    colour,
    esc,
    est_cell,
    fmt,
    json_script,
    page,
    ramp_css,
    score_bar,
    settings_block,
    table,
    tip_attr,
)
from envsuite.leaderboard._records import Entrant, ResultKey
from envsuite.leaderboard._stats import Estimate, KeySummary
from envsuite.leaderboard._terminal import fmt_sampling, fmt_seeds
from envsuite.leaderboard._viewer import ViewerBundle, log_href, sample_href

KEY_FIELDS = ("partner", "renderer", "sampling", "seeds", "version")
OPEN_RESULTS_MAX = 300
"""Up to this many result rows the results table is open when the page loads."""


@dataclass(frozen=True)
class PageContext:
    """What every page needs besides the board."""

    board: Leaderboard
    families: Mapping[str, str]
    """Versioned env id -> family (the catalog's: ``envsuite.catalog_env_families``)."""
    viewer: ViewerBundle | None
    model_pages: Mapping[str, str]
    """Model name -> its page, relative to the index."""
    chart_svg: str | None = "chart.svg"
    chart_png: str | None = "chart.png"
    """The chart's file names (None: no chart, the board has too many envs)."""

    def family(self, env: str) -> str:
        return self.families.get(env, "other")

    def family_order(self) -> list[str]:
        """The families of the board's envs, in the catalog's order (``envsuite.family_order``)."""
        return family_order(self.family(e) for e in self.board.envs)

    def envs(self) -> list[str]:
        """Env versions grouped by family (in the catalog's order), then by id."""
        order = {f: i for i, f in enumerate(self.family_order())}
        return sorted(self.board.envs, key=lambda e: (order.get(self.family(e), len(order)), e))


@functools.lru_cache(maxsize=65536)
def key_field(key: ResultKey, name: str) -> str:
    if name == "sampling":
        return fmt_sampling(key.sampling)
    if name == "seeds":
        return fmt_seeds(key.seeds)
    return {"partner": key.partner or "-", "renderer": key.renderer, "version": key.package_version}[name]


def split_settings(keys: Sequence[ResultKey]) -> tuple[list[tuple[str, str]], list[str]]:
    """(fields every key shares, with their value) and the fields that vary (shown as columns)."""
    shared, varying = [], []
    for name in KEY_FIELDS:
        values = {key_field(k, name) for k in keys}
        if len(values) == 1:
            shared.append((name, values.pop()))
        elif values:
            varying.append(name)
    return shared, varying


def entrant_labels(entrants: Iterable[Entrant]) -> dict[Entrant, str]:
    """The model name, plus what differs when one model appears under several settings."""
    entrants = list(entrants)
    by_model: dict[str, list[Entrant]] = defaultdict(list)
    for e in entrants:
        by_model[e.model].append(e)
    fields: tuple[tuple[str, Callable[[Entrant], str]], ...] = (
        ("renderer", lambda x: x.renderer),
        ("sampling", lambda x: fmt_sampling(x.sampling)),
        ("v", lambda x: x.package_version),
    )
    labels = {}
    for e in entrants:
        twins = by_model[e.model]
        extra = [f"{name} {get(e)}" for name, get in fields if len({get(t) for t in twins}) > 1]
        labels[e] = e.model + (f" ({', '.join(extra)})" if extra else "")
    return labels


def model_link(ctx: PageContext, model: str) -> str:
    href = ctx.model_pages.get(model)
    name = f'<span class="id">{esc(model)}</span>'
    return f'<a href="{esc(href)}">{name}</a>' if href else name


def header(ctx: PageContext, shared: Sequence[tuple[str, str]]) -> str:
    board = ctx.board
    pct = round(board.confidence * 100)
    notices = []
    if ctx.viewer is not None:
        notices.append(
            '<p class="notice file-notice" hidden>Transcripts open in Inspect\'s log viewer (bundled in '
            "<code>viewer/</code>), which browsers run only over http: serve this folder, e.g. "
            "<code>envsuite leaderboard --serve DIR</code> or <code>python -m http.server -d DIR</code>.</p>"
        )
        if ctx.viewer.error:
            notices.append(f'<p class="notice">{esc(ctx.viewer.error)}</p>')
    return f"""<h1>envsuite leaderboard</h1>
<p>{len(board.models)} model(s) &times; {len(board.envs)} env version(s), {len(board.entries)} result(s).
Means with {pct}% percentile-bootstrap intervals (B={board.n_boot}, seed={board.seed}); click a column header to sort.</p>
{settings_block(shared)}
{"".join(notices)}
<nav class="toc"><a href="#s-overall">Overall</a><a href="#s-matrix">Matrix</a><a href="#s-results">Results</a><a href="#s-games">Games</a><a href="#s-chart">Chart</a></nav>"""


def filters(ctx: PageContext) -> str:
    board = ctx.board
    options = {
        "family": ctx.family_order(),
        "version": sorted({e.key.package_version for e in board.entries}),
        "partner": sorted({e.key.partner or "-" for e in board.entries}),
        "model": list(board.models),
    }
    parts = []
    for name, values in options.items():
        opts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        parts.append(
            f'<label>{name} <select id="filter-{name}" data-filter="{name}"><option value="">all</option>{opts}</select></label>'
        )
    return f'<div class="filters" role="search">{"".join(parts)}</div>'


def overall_section(ctx: PageContext, labels: Mapping[Entrant, str]) -> str:
    board = ctx.board
    rows = [
        f'<tr data-filter-row data-model="{esc(o.entrant.model)}" data-version="{esc(o.entrant.package_version)}">'
        f'<td class="num" data-sort="{o.rank}">{o.rank}</td>'
        f"<td>{model_link(ctx, o.entrant.model)}{_suffix(labels[o.entrant], o.entrant.model)}</td>"
        f"{est_cell(o.score, bar=(0.0, 1.0))}</tr>"
        for o in board.overall
    ]
    over = ", ".join(board.shared_envs) or "none shared by every model"
    body = (
        table("overall", [("rank", "num"), ("model", ""), ("score", "num")], rows)
        if rows
        else "<p>No results.</p>"
    )
    return f"""<h2 id="s-overall">Overall</h2>
<p class="muted">Mean over envs of the normalized score (0 = the env's lowest reward, 1 = its highest), over the env
versions every model has: {esc(over)}.</p>
{body}"""


def _suffix(label: str, model: str) -> str:
    return f' <span class="muted">{esc(label[len(model) :].strip())}</span>' if label != model else ""


def matrix_section(ctx: PageContext, labels: Mapping[Entrant, str]) -> str:
    board = ctx.board
    envs = ctx.envs()
    cells: dict[tuple[Entrant, str], MatrixCell] = {(c.entrant, c.env): c for c in board.cells}
    scores = {o.entrant: o for o in board.overall}
    entrants = sorted(
        {c.entrant for c in board.cells},
        key=lambda e: (scores[e].rank if e in scores else 10**9, e.model, e.sampling),
    )
    groups: list[tuple[str, int]] = []
    for env in envs:
        family = ctx.family(env)
        if groups and groups[-1][0] == family:
            groups[-1] = (family, groups[-1][1] + 1)
        else:
            groups.append((family, 1))
    family_row = "".join(
        f'<th class="family" colspan="{n}" data-family="{esc(f)}">{esc(f)}</th>' for f, n in groups
    )
    head_extra = f'<tr><th class="sticky"></th><th></th>{family_row}</tr>'
    headers = [("model", "sticky"), ("overall", "num")]
    head_cells = "".join(
        f'<th class="env" data-family="{esc(ctx.family(e))}" data-filter-col title="{esc(e)}">{esc(e)}</th>'
        for e in envs
    )
    rows = []
    for entrant in entrants:
        o = scores.get(entrant)
        overall = est_cell(o.score, 2) if o else '<td class="num" data-sort="-1">-</td>'
        tds = "".join(_matrix_cell(ctx, cells.get((entrant, env)), env, labels[entrant]) for env in envs)
        rows.append(
            f'<tr data-filter-row data-model="{esc(entrant.model)}" data-version="{esc(entrant.package_version)}">'
            f'<td class="sticky">{model_link(ctx, entrant.model)}{_suffix(labels[entrant], entrant.model)}</td>'
            f"{overall}{tds}</tr>"
        )
    head = "".join(f'<th class="{cls}">{esc(label)}</th>' for label, cls in headers) + head_cells
    legend = (
        f'<div class="legend">normalized score 0 <span class="ramp" style="{ramp_css()}"></span> 1 '
        "&middot; hatched: no result &middot; hover or focus a cell for its interval</div>"
    )
    return f"""<h2 id="s-matrix">Model &times; env</h2>
{legend}
<div class="scroll"><table id="matrix" class="sortable matrix"><thead>{head_extra}<tr>{head}</tr></thead>
<tbody>{"".join(rows)}</tbody></table></div>"""


def _matrix_cell(ctx: PageContext, cell: MatrixCell | None, env: str, label: str) -> str:
    family = esc(ctx.family(env))
    if cell is None:
        return f'<td class="cell none" data-sort="-1" data-family="{family}" data-filter-col></td>'
    est = cell.score
    bg, fg = colour(est.mean)
    tip = tip_attr(
        [
            label,
            env,
            f"normalized {fmt(est.mean)}, {ctx.board.confidence:.0%} CI {ci_text(est)}",
            f"n = {est.n} samples",
        ]
    )
    return (
        f'<td class="cell" tabindex="0" data-sort="{est.mean:.6f}" data-family="{family}" data-filter-col '
        f'data-tip="{tip}" style="background:{bg};color:{fg}">{fmt(est.mean, 2)}</td>'
    )


def transcripts_cell(ctx: PageContext, entry: KeySummary, root: str = "") -> str:
    links = []
    for path in entry.log_paths:
        href = log_href(ctx.viewer, path)
        if href is not None:
            links.append(f'<a href="{esc(root + href)}">log</a>')
    linked = sum(1 for ep in entry.episodes if sample_href(ctx.viewer, ep.log_path, ep.sample_id, ep.epoch))
    if linked:
        links.append(
            f'<details class="episodes" data-key="{esc(entry.key.key_id)}"><summary>{linked} episode(s)</summary></details>'
        )
    return f"<td>{' '.join(links) or '-'}</td>"


def episode_data(ctx: PageContext) -> dict[str, list[list[object]]]:
    """Per key: [seed, epoch, reward, viewer link or null] for each episode (read by the page script)."""
    data: dict[str, list[list[object]]] = {}
    for entry in ctx.board.entries:
        refs: list[list[object]] = [
            [
                ep.seed,
                ep.epoch,
                round(ep.reward, 4),
                sample_href(ctx.viewer, ep.log_path, ep.sample_id, ep.epoch),
            ]
            for ep in entry.episodes
        ]
        if any(r[3] for r in refs):
            data[entry.key.key_id] = refs
    return data


def pass_ks_of(entries: Iterable[KeySummary]) -> list[int]:
    """The k any of ``entries`` reports pass@k at (a column each)."""
    return sorted({v.k for entry in entries for v in entry.pass_at.values})


def pass_cells(entry: KeySummary, ks: Sequence[int]) -> str:
    """One cell per k: pass@k with its interval and the plays per episode (n) behind it, or ``-``."""
    cells = []
    for k in ks:
        found = entry.pass_at.at(k)
        if found is None:
            cells.append(est_cell(None))
            continue
        est = found.pass_at_k
        cells.append(
            f'<td class="num" data-sort="{est.mean:.6f}">{fmt(est.mean)} <span class="ci">{ci_text(est)}</span> '
            f'<span class="muted">n={found.n}</span></td>'
        )
    return "".join(cells)


PASS_NOTE = (
    "pass@k: the chance that at least one of k plays of an episode succeeds (unbiased estimate from the "
    "n plays stored per episode, interval over episodes); rows of different plays per episode are "
    "different result keys, never pooled."
)


def results_section(ctx: PageContext, varying: Sequence[str]) -> str:
    ks = pass_ks_of(ctx.board.entries)
    headers = [("env", ""), ("family", ""), ("model", ""), *((v, "") for v in varying)]
    headers += [
        ("n", "num"),
        ("reward", "num"),
        ("success", "num"),
        ("normalized", "num"),
        *((f"pass@{k}", "num") for k in ks),
        ("transcripts", ""),
    ]
    rows = []
    for entry in ctx.board.entries:
        key = entry.key
        env = key.versioned_env_id
        extra = "".join(f'<td class="id">{esc(key_field(key, v))}</td>' for v in varying)
        rows.append(
            f'<tr data-filter-row data-key="{esc(key.key_id)}" data-family="{esc(ctx.family(env))}" '
            f'data-model="{esc(key.model)}" data-version="{esc(key.package_version)}" data-partner="{esc(key.partner or "-")}">'
            f'<td class="id">{esc(env)}</td><td>{esc(ctx.family(env))}</td><td>{model_link(ctx, key.model)}</td>{extra}'
            f'<td class="num" data-sort="{entry.n_samples}">{entry.n_samples}</td>'
            f"{est_cell(entry.reward)}{est_cell(entry.success)}{est_cell(entry.normalized)}"
            f"{pass_cells(entry, ks)}{transcripts_cell(ctx, entry)}</tr>"
        )
    # A big board's table opens on request: laying out thousands of rows would hold up the page
    # (the matrix above already shows every score).
    is_open = " open" if len(rows) <= OPEN_RESULTS_MAX else ""
    return f"""<h2 id="s-results">Results per env</h2>
<p class="muted">One row per result key (what a score depends on; rows are never pooled).{" " + PASS_NOTE if ks else ""} <output data-count-for="results"></output></p>
<details class="results"{is_open}><summary>{len(rows)} result rows</summary>
{table("results", headers, rows)}</details>"""


def games_section(ctx: PageContext) -> str:
    board = ctx.board
    if not board.ratings and not board.head_to_head:
        return '<h2 id="s-games">Games</h2><p>No head-to-head matches stored.</p>'
    lo = min((r.mu - 3 * r.sigma for r in board.ratings), default=0.0)
    hi = max((r.mu + 3 * r.sigma for r in board.ratings), default=1.0)
    pools = sorted(
        {r.pool for r in board.ratings} | {h.pool for h in board.head_to_head},
        key=lambda p: (p != ALL_POOLS, p),
    )
    # One collapsible block per pool, all games open: closed blocks cost the browser no layout,
    # which keeps a catalog-wide board (dozens of game envs) quick to open.
    blocks = []
    for i, pool in enumerate(pools):
        rows = [
            f'<tr data-filter-row data-model="{esc(r.player)}"><td>{model_link(ctx, r.player)}</td>'
            f'<td class="num" data-sort="{r.ordinal:.6f}">{r.ordinal:.2f}</td>'
            f'<td class="num" data-sort="{r.mu:.6f}">{_rating_bar(r.mu, r.sigma, lo, hi)}{r.mu:.2f} '
            f'<span class="ci">&plusmn; {r.sigma:.2f}</span></td>'
            f'<td class="num" data-sort="{r.matches}">{r.matches}</td></tr>'
            for r in board.ratings
            if r.pool == pool
        ]
        ratings = table(
            f"ratings-{i}",
            [("player", ""), ("ordinal", "num"), ("mu ± sigma", "num"), ("matches", "num")],
            rows,
        )
        h2h = _h2h_table(ctx, pool, [h for h in board.head_to_head if h.pool == pool], i)
        title = "all games" if pool == ALL_POOLS else pool
        blocks.append(
            f'<details class="pool"{" open" if pool == ALL_POOLS else ""}><summary class="id">{esc(title)} '
            f'<span class="muted">({len(rows)} players)</span></summary>{ratings}{h2h}</details>'
        )
    return f"""<h2 id="s-games">Games</h2>
<p class="muted">openskill ratings (PlackettLuce, replayed from every stored match; ranked by ordinal = mu &minus;
3 sigma; the bar spans mu &plusmn; 3 sigma), and head to head: the row player's share of points against the column
player (win 1, draw &frac12;) over the matches both played. &ldquo;all games&rdquo; rates every game together.</p>
{"".join(blocks)}"""


def _rating_bar(mu: float, sigma: float, lo: float, hi: float) -> str:
    return score_bar(Estimate(mu, mu - 3 * sigma, mu + 3 * sigma, 0), lo, hi)


def _h2h_table(ctx: PageContext, pool: str, records: list[HeadToHead], index: int) -> str:
    players = sorted({h.row for h in records})
    by_pair = {(h.row, h.col): h for h in records}
    rows = []
    for a in players:
        tds = []
        for b in players:
            h = by_pair.get((a, b))
            if h is None:
                tds.append('<td class="cell none" data-sort="-1"></td>')
                continue
            bg, fg = colour(h.win_rate)
            tip = tip_attr(
                [f"{a} vs {b} in {pool}", f"{h.wins} won, {h.draws} drawn, {h.losses} lost of {h.matches}"]
            )
            tds.append(
                f'<td class="cell" tabindex="0" data-sort="{h.win_rate:.6f}" data-tip="{tip}" '
                f'style="background:{bg};color:{fg}">{h.win_rate:.2f}</td>'
            )
        rows.append(f'<tr><td class="sticky">{model_link(ctx, a)}</td>{"".join(tds)}</tr>')
    head = "".join(f'<th class="num" title="{esc(p)}"><span class="id">{esc(p)}</span></th>' for p in players)
    return (
        f'<div class="scroll"><table id="h2h-{index}" class="sortable matrix h2h">'
        f'<thead><tr><th class="sticky">vs</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def chart_section(ctx: PageContext) -> str:
    if ctx.chart_svg is None or ctx.chart_png is None:
        return f"""<h2 id="s-chart">Chart</h2>
<p class="muted">No chart for {len(ctx.board.envs)} envs (one panel each would be unreadable): the matrix above
shows every env on one scale.</p>"""
    svg, png = urllib.parse.quote(ctx.chart_svg), urllib.parse.quote(ctx.chart_png)
    # loading="lazy": the chart is at the bottom; the page is usable before it arrives.
    return f"""<h2 id="s-chart">Chart</h2>
<p><img class="chart" loading="lazy" src="./{svg}" alt="normalized score per env with confidence intervals, one shared scale">
<br><a href="./{png}">PNG version</a></p>"""


def render_index(ctx: PageContext) -> str:
    """The index page as a string."""
    board = ctx.board
    shared, varying = split_settings([e.key for e in board.entries])
    labels = entrant_labels({c.entrant for c in board.cells} | {o.entrant for o in board.overall})
    body = "\n".join(
        [
            header(ctx, shared),
            filters(ctx),
            overall_section(ctx, labels),
            matrix_section(ctx, labels),
            f'<section class="lazy">{results_section(ctx, varying)}</section>',
            f'<section class="lazy">{games_section(ctx)}</section>',
            f'<section class="lazy">{chart_section(ctx)}</section>',
            json_script("episode-data", episode_data(ctx)),
        ]
    )
    return page("envsuite leaderboard", body)
