"""A static leaderboard page: one ``index.html`` with inline CSS and JS, plus the chart files.

No network, no CDN. Every piece of stored text (model names, env ids, paths, metric names) goes
through :func:`html.escape`; log links are relative file links whose path is percent-encoded, so a
stored ``javascript:`` string becomes a harmless relative path.
"""

from __future__ import annotations

import html
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._chart import write_chart
from envsuite.leaderboard._stats import Estimate, KeySummary
from envsuite.leaderboard._terminal import fmt_sampling, fmt_seeds
from envsuite.leaderboard._text import display_text

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1b1b1b}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eef2f8;cursor:pointer;user-select:none;white-space:nowrap}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.ci{color:#667;font-size:11px}
details{font-size:12px}
"""

# Sorting reads only data-sort attributes and textContent, and moves existing row nodes:
# nothing from the data is ever parsed as HTML. A URL hash "#sort=<table-id>:<col>:<asc|desc>"
# picks the initial order (used by the headless-browser test, handy for sharing a view).
_JS = """
(function () {
  function key(cell) {
    var raw = cell.getAttribute("data-sort");
    if (raw !== null && raw !== "" && !isNaN(Number(raw))) { return Number(raw); }
    return cell.textContent.toLowerCase();
  }
  function sortBy(table, col, dir) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      var c = x < y ? -1 : x > y ? 1 : 0;
      return dir === "asc" ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      if (i === col) { th.setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending"); }
      else { th.removeAttribute("aria-sort"); }
    });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () {
        var dir = th.getAttribute("aria-sort") === "ascending" ? "desc" : "asc";
        sortBy(table, col, dir);
      });
    });
  });
  var m = /^#sort=([A-Za-z0-9_-]+):(\\d+):(asc|desc)$/.exec(window.location.hash);
  if (m) {
    var t = document.getElementById(m[1]);
    if (t && t.classList.contains("sortable")) { sortBy(t, parseInt(m[2], 10), m[3]); }
  }
  document.body.setAttribute("data-ready", "1");
  var count = document.getElementById("row-count");
  if (count) { count.textContent = String(document.querySelectorAll("#results tbody tr").length) + " rows"; }
})();
"""


_RESULT_COLUMNS = (
    *("env", "model", "partner", "renderer", "sampling", "seeds", "version", "n"),
    *("reward", "success", "normalized", "metrics", "logs"),
)


@dataclass(frozen=True)
class HtmlReport:
    """The files :func:`write_html` wrote."""

    index: Path
    chart_svg: Path
    chart_png: Path


def esc(text: object) -> str:
    return html.escape(display_text(text), quote=True)


def log_href(log_path: str, out_dir: Path) -> str:
    """A relative link from the page to a log: http(s) URLs kept, anything else is a file path."""
    parsed = urllib.parse.urlparse(log_path)
    if parsed.scheme in ("http", "https") and parsed.netloc:
        return log_path
    path = log_path[len("file://") :] if log_path.startswith("file://") else log_path
    target = Path(path) if os.path.isabs(path) else Path.cwd() / path
    rel = os.path.relpath(target, out_dir.resolve())
    return "./" + urllib.parse.quote(Path(rel).as_posix(), safe="/")


def _est_cell(est: Estimate | None) -> str:
    if est is None:
        return '<td class="num" data-sort="-1">-</td>'
    return (
        f'<td class="num" data-sort="{est.mean:.6f}">{est.mean:.3f} '
        f'<span class="ci">[{est.lo:.3f}, {est.hi:.3f}]</span></td>'
    )


def _table(table_id: str, headers: Iterable[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (
        f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _result_row(entry: KeySummary, out_dir: Path) -> str:
    key = entry.key
    links = " ".join(
        f'<a href="{esc(log_href(p, out_dir))}">{esc(os.path.basename(p) or p)}</a>' for p in entry.log_paths
    )
    metrics = "".join(f"<li>{esc(name)}: {value:.4g}</li>" for name, value in entry.metric_means.items())
    details = f"<details><summary>{len(entry.metric_means)}</summary><ul>{metrics}</ul></details>"
    cells = [
        f"<td>{esc(key.versioned_env_id)}</td>",
        f"<td>{esc(key.model)}</td>",
        f"<td>{esc(key.partner or '-')}</td>",
        f"<td>{esc(key.renderer)}</td>",
        f"<td>{esc(fmt_sampling(key.sampling))}</td>",
        f'<td title="{esc(key.seeds)}">{esc(fmt_seeds(key.seeds))}</td>',
        f"<td>{esc(key.package_version)}</td>",
        f'<td class="num" data-sort="{entry.n_samples}">{entry.n_samples}</td>',
        _est_cell(entry.reward),
        _est_cell(entry.success),
        _est_cell(entry.normalized),
        f"<td>{details if entry.metric_means else '-'}</td>",
        f"<td>{links or '-'}</td>",
    ]
    return f'<tr data-key="{esc(key.key_id)}">{"".join(cells)}</tr>'


def render_html(board: Leaderboard, out_dir: Path, chart_svg: str, chart_png: str) -> str:
    """The page as a string (``chart_*`` are file names relative to the page)."""
    pct = round(board.confidence * 100)
    results = _table(
        "results",
        _RESULT_COLUMNS,
        (_result_row(e, out_dir) for e in board.entries),
    )
    overall_rows = (
        f'<tr><td class="num" data-sort="{o.rank}">{o.rank}</td><td>{esc(o.entrant.model)}</td>'
        f"<td>{esc(o.entrant.renderer)}</td><td>{esc(fmt_sampling(o.entrant.sampling))}</td>"
        f"<td>{esc(o.entrant.package_version)}</td>{_est_cell(o.score)}</tr>"
        for o in board.overall
    )
    overall = _table("overall", ["rank", "model", "renderer", "sampling", "version", "score"], overall_rows)
    rating_rows = (
        f'<tr><td>{esc(r.pool)}</td><td>{esc(r.player)}</td><td class="num" data-sort="{r.ordinal:.6f}">'
        f'{r.ordinal:.2f}</td><td class="num" data-sort="{r.mu:.6f}">{r.mu:.2f}</td>'
        f'<td class="num" data-sort="{r.sigma:.6f}">{r.sigma:.2f}</td>'
        f'<td class="num" data-sort="{r.matches}">{r.matches}</td></tr>'
        for r in board.ratings
    )
    ratings = _table("ratings", ["pool", "player", "ordinal", "mu", "sigma", "matches"], rating_rows)
    shared = ", ".join(board.shared_envs) or "none shared by every model"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>envsuite leaderboard</title><style>{_CSS}</style></head>
<body data-ready="0">
<h1>envsuite leaderboard</h1>
<p>Means with {pct}% percentile-bootstrap intervals (B={board.n_boot}, seed={board.seed}); click a column header to sort.
<span id="row-count"></span></p>
<h2>Overall</h2>
<p>Mean over envs of the normalized mean reward, over: {esc(shared)}.</p>
{overall}
<h2>Results per env</h2>
{results}
<h2>Chart</h2>
<p><img src="./{esc(chart_svg)}" alt="mean reward per env with confidence intervals" style="max-width:100%">
<br><a href="./{esc(chart_png)}">PNG version</a></p>
<h2>Ratings</h2>
{ratings if board.ratings else "<p>No head-to-head matches stored.</p>"}
<script>{_JS}</script>
</body></html>
"""


def write_html(out_dir: str | os.PathLike[str], board: Leaderboard) -> HtmlReport:
    """Write ``index.html``, ``chart.svg`` and ``chart.png`` into ``out_dir`` (created if needed)."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    chart = write_chart(board, directory)
    index = directory / "index.html"
    index.write_text(render_html(board, directory, chart.svg.name, chart.png.name), encoding="utf-8")
    return HtmlReport(index=index, chart_svg=chart.svg, chart_png=chart.png)
