"""The static page: escaping of model-provided text, the chart, and the page driven in headless chromium
(sorting, filtering, the matrix tooltip, hostile strings as text, phone width)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envsuite.leaderboard import (
    EpisodeResult,
    HtmlReport,
    Leaderboard,
    MatchResult,
    ResultKey,
    ResultStore,
    RunRecord,
    build_leaderboard,
    display_text,
    write_html,
)
from tests.support.browser import launch_browser

SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'
CONTROL = "ctl\x1b[2Jname\u202e"
HOSTILE = (SCRIPT, BREAKOUT, CONTROL)
REPO_ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {"arithmetic-v0": "math", "tictactoe-v0": "games", "twenty_questions-v0": "twenty questions"}


def _key(model: str, env_id: str = "arithmetic-v0", partner: str = "", version: str = "0.1.0") -> ResultKey:
    return ResultKey.create(
        model=model,
        env_id=env_id,
        partner=partner,
        renderer="chatml",
        sampling={"temperature": 0.7, "max_tokens": 64},
        seeds=range(8),
        package_version=version,
    )


def _fill(store: ResultStore, logs: Path) -> None:
    logs.mkdir(parents=True, exist_ok=True)
    models = {"alpha": 0.8, "beta": 0.1, SCRIPT: 0.5, BREAKOUT: -0.2, CONTROL: 0.3}
    for i, (model, level) in enumerate(models.items()):
        for j, env in enumerate(FAMILIES):
            log = logs / f"run{i}-{j}.eval"
            log.write_text("{}")  # not a real Inspect log: the page must not link it
            eps = [
                EpisodeResult(
                    seed=s,
                    reward=max(-1.0, min(1.0, level + (0.2 if s % 2 else -0.2) - 0.1 * j)),
                    success=level > 0,
                    metrics={SCRIPT: 1.0, "turns": float(s)},
                    transcript_ref=f"{log}#{BREAKOUT}",
                )
                for s in range(8)
            ]
            partner = "random" if env == "tictactoe-v0" else ""
            store.add_run(RunRecord(_key(model, env, partner), f"run-{i}-{j}", log_path=str(log)), eps)
    store.add_run(RunRecord(_key("beta", version="0.2.0"), "beta-new"), [EpisodeResult(seed=0, reward=0.9)])
    evil_env = _key("alpha", env_id=f"{BREAKOUT}-v1", partner=SCRIPT)
    store.add_run(
        RunRecord(evil_env, "evil", log_path="javascript:alert(1)", reward_range=(0.0, 1.0)),
        [EpisodeResult(seed=0, reward=1.0)],
    )
    store.add_matches(
        MatchResult(f"g{i}", "tictactoe-v0", ("alpha", SCRIPT, CONTROL), (0, 1, i % 2), f"2025-01-0{i + 1}")
        for i in range(3)
    )


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leaderboard]:
    tmp = tmp_path_factory.mktemp("board")
    with ResultStore(tmp / "lb.sqlite") as store:
        _fill(store, tmp / "logs")
        yield build_leaderboard(store, n_boot=200)


@pytest.fixture(scope="module")
def site(board: Leaderboard, tmp_path_factory: pytest.TempPathFactory) -> HtmlReport:
    families = {**FAMILIES, f"{BREAKOUT}-v1": "plugins"}
    return write_html(tmp_path_factory.mktemp("site"), board, families=families)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_browser()


def _pages(site: HtmlReport) -> list[Path]:
    return [site.index, *site.model_pages.values()]


def test_page_escapes_every_model_provided_string(site: HtmlReport) -> None:
    for path in _pages(site):
        page = path.read_text(encoding="utf-8")
        assert SCRIPT not in page and BREAKOUT not in page and "\x1b" not in page and "\u202e" not in page
        assert "<img src=x" not in page and "javascript:" not in page
        scripts = re.findall(r"<script[^>]*>", page)
        assert scripts in (
            ['<script id="episode-data" type="application/json">', "<script>"],
            ["<script>"],
        ), scripts
        assert "Content-Security-Policy" in page and "script-src 'sha256-" in page
        hrefs = re.findall(r'href="([^"]*)"', page)
        assert hrefs and not [h for h in hrefs if ":" in h.split("#", 1)[0]], hrefs  # relative links only
        assert not [h for h in hrefs if h.endswith(".eval")], "no raw log archives"
    index = site.index.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in index
    assert site.viewer is None  # the fake logs are not Inspect logs: nothing to view, nothing linked
    assert site.chart_svg is not None and site.chart_png is not None
    svg = site.chart_svg.read_text(encoding="utf-8")
    assert SCRIPT not in svg and BREAKOUT not in svg
    elements = list(ET.fromstring(svg).iter())  # well-formed, and names stay text, never markup
    assert not [e for e in elements if e.tag.rsplit("}", 1)[-1] in ("script", "img", "foreignObject")]
    assert not [a for e in elements for a in e.attrib if a.lower().startswith("on")]
    assert site.chart_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_is_deterministic(board: Leaderboard, tmp_path: Path) -> None:
    first = write_html(tmp_path / "one", board, families=FAMILIES).chart_svg
    second = write_html(tmp_path / "two", board, families=FAMILIES).chart_svg
    assert first is not None and second is not None and first.read_bytes() == second.read_bytes()


def _open(browser: Any, path: Path, width: int = 1400) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.set_default_timeout(15_000)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.dialogs = dialogs
    return page


def _column(page: Any, table: str, header: str) -> list[str]:
    """Texts of one column in the visible rows of a table."""
    return page.evaluate(
        """([table, header]) => {
            const t = document.getElementById(table);
            const heads = Array.from(t.tHead.rows[t.tHead.rows.length - 1].cells).map(c => c.textContent.trim());
            const col = heads.indexOf(header);
            return Array.from(t.tBodies[0].rows).filter(r => !r.hidden).map(r => r.cells[col].textContent.trim());
        }""",
        [table, header],
    )


def test_sorting_changes_the_row_order(browser: Any, site: HtmlReport) -> None:
    page = _open(browser, site.index)
    header = page.locator("#results thead tr:last-child th", has_text=re.compile("^model$"))
    header.click()
    models = _column(page, "results", "model")
    assert models == sorted(models, key=str.lower) and len(models) == 17
    header.click()
    assert _column(page, "results", "model") == sorted(models, key=str.lower, reverse=True)
    page.locator(
        "#results thead tr:last-child th", has_text=re.compile("^n$")
    ).click()  # numbers: largest first
    counts = [int(n) for n in _column(page, "results", "n")]
    assert counts == sorted(counts, reverse=True) and counts[-1] == 1
    page.locator("#matrix thead tr:last-child th.env", has_text="tictactoe-v0").click()
    order = _column(page, "matrix", "tictactoe-v0")
    scores = [float(s) for s in order if s]
    assert scores == sorted(scores, reverse=True) and len(scores) == 5
    page.close()


def test_filters_change_the_visible_rows_and_columns(browser: Any, site: HtmlReport) -> None:
    page = _open(browser, site.index)
    page.select_option("#filter-family", "games")
    assert set(_column(page, "results", "env")) == {"tictactoe-v0"}
    visible_envs = page.eval_on_selector_all(
        "#matrix th.env", "els => els.filter(e => !e.hidden).map(e => e.textContent)"
    )
    assert visible_envs == ["tictactoe-v0"]
    page.select_option("#filter-family", "")
    page.select_option("#filter-model", "beta")
    assert set(_column(page, "results", "model")) == {"beta"} and len(_column(page, "results", "model")) == 4
    assert _column(page, "matrix", "model") == [
        "beta (v 0.2.0)",
        "beta (v 0.1.0)",
    ]  # one row per package version
    page.select_option("#filter-version", "0.2.0")
    assert _column(page, "results", "env") == ["arithmetic-v0"]
    page.select_option("#filter-model", "")
    page.select_option("#filter-version", "")
    page.select_option("#filter-partner", "random")
    assert (
        set(_column(page, "results", "env")) == {"tictactoe-v0"} and len(_column(page, "results", "env")) == 5
    )
    assert "5 of 17 rows" in page.inner_text("output[data-count-for=results]")
    page.close()


def test_a_matrix_cell_shows_its_interval(browser: Any, site: HtmlReport, board: Leaderboard) -> None:
    page = _open(browser, site.index)
    assert page.locator("#tip").is_hidden()
    row = page.locator("#matrix tbody tr", has=page.locator("td.sticky", has_text=re.compile("^alpha$")))
    cell = row.locator("td.cell").first  # the first env column: arithmetic-v0 (math comes first)
    cell.hover()
    tip = page.locator("#tip")
    assert tip.is_visible()
    (expected,) = [c for c in board.cells if c.entrant.model == "alpha" and c.env == "arithmetic-v0"]
    text = tip.inner_text()
    assert f"[{expected.score.lo:.3f}, {expected.score.hi:.3f}]" in text and "arithmetic-v0" in text
    assert cell.inner_text() == f"{expected.score.mean:.2f}"
    page.mouse.move(0, 0)
    assert tip.is_hidden()
    cell.focus()  # keyboard users get it too
    assert tip.is_visible()
    page.close()


def test_hostile_strings_render_as_text_everywhere(browser: Any, site: HtmlReport) -> None:
    for path in _pages(site):
        page = _open(browser, path)
        text = page.inner_text("body")
        for hostile in (SCRIPT, BREAKOUT):
            assert hostile in text, (path.name, hostile)
        assert display_text(CONTROL) in text and "\x1b" not in text
        assert page.locator("img[src='x']").count() == 0 and page.locator("script").count() <= 2
        if page.locator("td.cell[data-tip]").count():
            page.locator("td.cell[data-tip]").first.hover()
        assert page.dialogs == []
        page.close()
    page = _open(browser, site.index)
    for cell in (
        page.locator("#matrix td.cell[data-tip]").all()[:6]
        + page.locator("details[open] table.h2h td.cell[data-tip]").all()
    ):
        cell.hover()
        assert "<script" not in page.locator("#tip").inner_html()  # tooltips are text too
    assert page.dialogs == []
    page.close()


def test_per_model_pages_compare_with_a_baseline(browser: Any, site: HtmlReport, board: Leaderboard) -> None:
    assert set(site.model_pages) == set(board.models)
    page = _open(browser, site.model_pages["beta"])
    baseline = board.baselines["beta"]
    assert baseline == next(m for m in board.models if m != "beta")  # the best-ranked other model
    assert f"against {baseline}" in page.inner_text("h2")
    (comparison,) = [c for c in board.comparisons if c.model == "beta" and c.env == "tictactoe-v0"]
    assert comparison.comparison is not None
    d = comparison.comparison.difference
    row = page.locator(
        "#model-results tbody tr", has=page.locator("td", has_text=re.compile("^tictactoe-v0$"))
    )
    assert f"{d.mean:+.3f} [{d.lo:.3f}, {d.hi:.3f}]" in row.inner_text()
    page.locator("a", has_text="leaderboard").first.click()
    page.wait_for_selector("#matrix")
    page.close()


def test_readable_at_phone_width_and_nothing_clipped(browser: Any, site: HtmlReport) -> None:
    for path in (site.index, site.model_pages["alpha"]):
        page = _open(browser, path, width=390)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path.name} is {overflow}px wider than a phone screen"
        # Wide tables scroll inside their own box instead of being cut.
        assert page.evaluate(
            "Array.from(document.querySelectorAll('.scroll')).every(s => getComputedStyle(s).overflowX === 'auto')"
        )
        page.close()


def test_system_setup_lives_in_the_makefile_not_in_tests() -> None:
    """Issue 15.17: tests stay offline; the install step (the README's commands) sets the system up."""
    # A command list that starts with the package tool (spelled split so this file does not match).
    installer = re.compile(r'\[\s*"(?:sudo",\s*")?(?:apt' + r'-get|apt|pip)"')
    offenders = [
        p.name for p in (REPO_ROOT / "tests").rglob("*.py") if installer.search(p.read_text("utf-8"))
    ]
    assert offenders == [], offenders
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    install = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "apt-get install -y -q chromium" in install
