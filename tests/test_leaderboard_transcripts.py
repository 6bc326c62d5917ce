"""The demo's page from real Inspect logs: every link opens, transcripts open in the bundled viewer at the
right sample, log paths are stored intact (issue 15.6) and the ratings are there (issue 15.7)."""

from __future__ import annotations

import io
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from envsuite.cli._demo_pipeline import DemoPlan, _rank
from envsuite.evals import BenchConfig, run_bench
from envsuite.leaderboard import REDACTED, ResultStore, start_server
from tests.conftest import TEST_MODEL
from tests.support.browser import launch_browser

LABELS = (TEST_MODEL, f"{TEST_MODEL}+copy")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_browser()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, DemoPlan]]:
    """The demo's layout (relative paths under the working directory), benched with the tiny model."""
    root = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("PWD", str(root))  # what a shell exports; it must not be taken for a password
        plan = DemoPlan(model=TEST_MODEL, envs=("arithmetic", "tictactoe"), episodes=2)
        for label in LABELS:
            config = BenchConfig(
                model=TEST_MODEL,
                env_ids=plan.envs,
                episodes=plan.episodes,
                max_tokens=8,
                log_root=str(Path(plan.out_dir) / "bench"),
                db=plan.db,
                label=label,
                display="none",
            )
            assert run_bench(config).completed
        page = _rank(plan, Console(file=io.StringIO()))
        yield page.parent, plan


def test_log_paths_are_stored_intact_and_ratings_are_current(demo: tuple[Path, DemoPlan]) -> None:
    page_dir, _ = demo
    with ResultStore(page_dir.parent / "leaderboard.sqlite", create=False) as store:
        runs = store.runs()
        assert len(runs) == 4
        for run in runs:
            assert run.log_path is not None and REDACTED not in run.log_path
            assert (page_dir.parent.parent.parent / run.log_path).is_file()
        assert store.matches() and store.ratings()
    index = (page_dir / "index.html").read_text(encoding="utf-8")
    assert "No head-to-head matches stored" not in index
    ratings = index.split('id="ratings-0"', 1)[1].split("</table>", 1)[0]
    assert ratings.count("<tr data-filter-row") == len(LABELS) + 1  # both models and the opponent


def _all_hrefs(page: Any) -> list[str]:
    # Open every episode list so the page script builds its links, then read every link's URL.
    page.eval_on_selector_all("details.episodes", "els => els.forEach(d => { d.open = true; })")
    page.wait_for_function(
        "Array.from(document.querySelectorAll('details.episodes')).every(d => d.querySelector('ol'))"
    )
    return page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")


def test_every_link_on_the_demo_page_opens(browser: Any, demo: tuple[Path, DemoPlan]) -> None:
    page_dir, _ = demo
    server = start_server(page_dir)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        urls: set[str] = set()
        pages = ["index.html", *(f"models/{p.name}" for p in (page_dir / "models").glob("*.html"))]
        assert len(pages) == 1 + len(LABELS)
        for name in pages:
            page.goto(base + name)
            page.wait_for_selector("body[data-ready='1']")
            urls.update(_all_hrefs(page))
        samples = [u for u in urls if "/samples/sample/" in u]
        assert len(samples) == len(LABELS) * 2 * 2  # every episode of every row
        for url in sorted(urls):
            assert url.startswith(base), url  # nothing leaves the folder
            if "viewer/index.html#/logs/" in url:
                _check_viewer(page, url)
            else:
                response = page.request.get(url.split("#", 1)[0])
                assert response.status == 200, url
        page.close()
    finally:
        server.shutdown()
        server.server_close()


def _check_viewer(page: Any, url: str) -> None:
    """The bundled viewer opens the link's log, at the linked sample when there is one."""
    route = urllib.parse.unquote(url.split("#", 1)[1])
    match = re.match(r"^/logs/(.+?\.(?:eval|json))(?:/samples/sample/(.+)/(\d+))?$", route)
    assert match is not None, route
    log, sample, epoch = match.groups()
    page.goto(url)
    if sample is None:
        page.get_by_text(re.compile(r"(arithmetic|tictactoe)-v0@\d+")).first.wait_for()
        return
    env, seed = sample.split("@")
    assert env in log  # the link names a sample of the row's own log
    page.get_by_text(f"Sample {sample} (Epoch {epoch})").first.wait_for()
    assert f"{env} episode {seed}" in page.inner_text("body")  # the sample's own input: the right seed


def test_without_a_server_the_page_says_how_to_open_transcripts(
    browser: Any, demo: tuple[Path, DemoPlan]
) -> None:
    page_dir, _ = demo
    page = browser.new_page()
    page.goto((page_dir / "index.html").resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    notice = page.locator(".file-notice")
    assert notice.is_visible() and "--serve" in notice.inner_text()
    assert page.locator("#matrix td.cell").count() == 4  # the page itself works from file://
    page.close()
