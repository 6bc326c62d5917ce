"""The static leaderboard site: a folder that works from ``file://`` and from any static host.

    DIR/index.html          overall ranking, model x env matrix, filters, results, games, chart
    DIR/models/<model>.html one page per model, against a baseline
    DIR/chart.svg, .png     the per-env chart on one normalized scale (up to MAX_CHART_ENVS envs)
    DIR/viewer/             Inspect's log viewer with the board's logs (when any log file exists)

No CDN and no network: the CSS and JavaScript ship in ``leaderboard/static`` and are inlined, and
each page's Content-Security-Policy admits only that script (by hash), so even a string that escaped
escaping could not run. Stored text is escaped everywhere (:func:`_html_parts.esc`); links to
transcripts are relative links into the bundled viewer, percent-encoded, never to raw archives.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envsuite.leaderboard._board import Leaderboard
from envsuite.leaderboard._chart import write_chart
from envsuite.leaderboard._page_index import PageContext, render_index
from envsuite.leaderboard._page_model import MODELS_DIR, model_page_name, render_model_page
from envsuite.leaderboard._viewer import bundle_viewer

MAX_CHART_ENVS = 30
"""Above this many envs the chart (one panel per env) is left out: the matrix shows them all."""


@dataclass(frozen=True)
class HtmlReport:
    """The files :func:`write_html` wrote."""

    index: Path
    chart_svg: Path | None
    chart_png: Path | None
    """None when the board has more than :data:`MAX_CHART_ENVS` envs (the matrix shows them all)."""
    model_pages: Mapping[str, Path]
    """Model name -> its page."""
    viewer: Path | None
    """The bundled Inspect viewer, or None when the board names no readable log."""


def _families(board: Leaderboard) -> dict[str, str]:
    # The core catalog knows each env's tags and package; the leaderboard layer may ask it.
    from envsuite import catalog_env_families

    return catalog_env_families(board.envs)


def render_html(
    board: Leaderboard, *, families: Mapping[str, str] | None = None, model_pages: bool = True
) -> str:
    """The index page as a string, without a bundled viewer (no transcript links)."""
    names = {m: f"{MODELS_DIR}/{model_page_name(m)}" for m in board.models} if model_pages else {}
    ctx = PageContext(board, families if families is not None else _families(board), None, names)
    return render_index(ctx)


def write_html(
    out_dir: str | os.PathLike[str],
    board: Leaderboard,
    *,
    families: Mapping[str, str] | None = None,
    viewer: bool = True,
) -> HtmlReport:
    """Write the site into ``out_dir`` (created if needed; pages from an earlier write are replaced).

    ``families`` maps env versions to families (default: the installed catalog's, see
    ``envsuite.catalog_env_families``); ``viewer=False`` skips bundling Inspect's viewer.
    """
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    chart = write_chart(board, directory) if len(board.envs) <= MAX_CHART_ENVS else None
    if chart is None:
        for stale in ("chart.svg", "chart.png"):
            (directory / stale).unlink(missing_ok=True)
    log_paths = {p for e in board.entries for p in e.log_paths}
    bundle = bundle_viewer(log_paths, directory) if viewer else None
    models_dir = directory / MODELS_DIR
    shutil.rmtree(models_dir, ignore_errors=True)
    models_dir.mkdir()
    names = {m: model_page_name(m) for m in board.models}
    ctx = PageContext(
        board,
        families if families is not None else _families(board),
        bundle,
        {m: f"{MODELS_DIR}/{name}" for m, name in names.items()},
        chart.svg.name if chart else None,
        chart.png.name if chart else None,
    )
    index = directory / "index.html"
    index.write_text(render_index(ctx), encoding="utf-8")
    pages = {}
    for model, name in names.items():
        pages[model] = models_dir / name
        pages[model].write_text(render_model_page(ctx, model), encoding="utf-8")
    return HtmlReport(
        index,
        chart.svg if chart else None,
        chart.png if chart else None,
        pages,
        bundle.directory if bundle else None,
    )
