"""The static page: escaping of model-provided text, chart files, and a real headless-browser load."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsuite.leaderboard import (
    EpisodeResult,
    Leaderboard,
    MatchResult,
    ResultKey,
    ResultStore,
    RunRecord,
    build_leaderboard,
    recompute_ratings,
    write_html,
)

SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'
REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def _key(model: str, env_id: str = "arithmetic-v0", partner: str = "") -> ResultKey:
    return ResultKey.create(
        model=model,
        env_id=env_id,
        partner=partner,
        renderer="chatml",
        sampling={"temperature": 0.7, "max_tokens": 64},
        seeds=range(8),
        package_version="0.1.0",
    )


def _fill(store: ResultStore, logs: Path) -> None:
    logs.mkdir(parents=True, exist_ok=True)
    models = {"alpha": 0.8, "beta": 0.1, SCRIPT: 0.5, BREAKOUT: -0.2}
    for i, (model, level) in enumerate(models.items()):
        log = logs / f"run{i}.eval"
        log.write_text("{}")
        eps = [
            EpisodeResult(
                seed=s,
                reward=max(-1.0, min(1.0, level + (0.2 if s % 2 else -0.2))),
                success=level > 0,
                metrics={SCRIPT: 1.0, "turns": float(s)},
                transcript_ref=f"{log}#{BREAKOUT}",
            )
            for s in range(8)
        ]
        store.add_run(RunRecord(_key(model), f"run-{i}", log_path=str(log)), eps)
    evil_env = _key("alpha", env_id=f"{BREAKOUT}-v1", partner=SCRIPT)
    store.add_run(
        RunRecord(evil_env, "evil", log_path="javascript:alert(1)", reward_range=(0.0, 1.0)),
        [EpisodeResult(seed=0, reward=1.0)],
    )
    store.add_matches(
        [
            MatchResult(f"g{i}", "tictactoe-v0", ("alpha", SCRIPT), (0, 1), f"2025-01-0{i + 1}")
            for i in range(3)
        ]
    )
    recompute_ratings(store)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Leaderboard]:
    with ResultStore(tmp_path / "lb.sqlite") as store:
        _fill(store, tmp_path / "logs")
        yield build_leaderboard(store, n_boot=200)


def test_page_escapes_every_model_provided_string(board: Leaderboard, tmp_path: Path) -> None:
    report = write_html(tmp_path / "site", board)
    page = report.index.read_text(encoding="utf-8")
    assert SCRIPT not in page and BREAKOUT not in page
    assert "<img src=x" not in page and 'href="javascript:' not in page
    assert page.count("<script>") == 1  # only the page's own sorting script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert "./../logs/run0.eval" in hrefs
    assert all(h.startswith("./") for h in hrefs), hrefs
    svg = report.chart_svg.read_text(encoding="utf-8")
    assert SCRIPT not in svg and BREAKOUT not in svg
    elements = list(ET.fromstring(svg).iter())  # well-formed, and names stay text, never markup
    assert not [e for e in elements if e.tag.rsplit("}", 1)[-1] in ("script", "img", "foreignObject")]
    assert not [a for e in elements for a in e.attrib if a.lower().startswith("on")]
    assert report.chart_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.chart_png.stat().st_size > 5_000


def test_chart_is_deterministic(board: Leaderboard, tmp_path: Path) -> None:
    first = write_html(tmp_path / "one", board).chart_svg.read_bytes()
    second = write_html(tmp_path / "two", board).chart_svg.read_bytes()
    assert first == second


def ensure_chromium() -> str:
    """Path of Debian's chromium, which `make install` puts there; tests never install anything."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: `make install` installs Debian's chromium (needs root or sudo)")
    return CHROMIUM


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


def _chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120, check=False)


def test_headless_browser_runs_the_page(board: Leaderboard, tmp_path: Path) -> None:
    binary = ensure_chromium()
    report = write_html(tmp_path / "site", board)
    url = report.index.resolve().as_uri()
    # Sort the results table by model (column 1), descending, through the URL hash.
    done = _chromium(binary, tmp_path / "profile", "--dump-dom", f"{url}#sort=results:1:desc")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'data-ready="1"' in dom, "the page script did not run"
    assert "5 rows</span>" in dom
    body = dom.split('id="results"', 1)[1].split("</table>", 1)[0]
    order = re.findall(r'<tr data-key="[0-9a-f]+"><td>[^<]*</td><td>([^<]*)</td>', body)
    assert len(order) == 5
    assert order == sorted(order, key=str.lower, reverse=True)
    assert 'aria-sort="descending"' in body
    assert '<img src="x"' not in dom and 'onerror="alert' not in dom  # the payload stayed text
    artifacts = REPO_ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "leaderboard.png"
    shot.unlink(missing_ok=True)
    done = _chromium(binary, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1280,900", url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.copyfile(report.chart_png, artifacts / "leaderboard_chart.png")
