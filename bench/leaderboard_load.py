"""How fast the leaderboard page loads for a big store: 20 models x 100 envs, in headless chromium.

    .venv/bin/python bench/leaderboard_load.py [--models 20] [--envs 100] [--episodes 10] [--repeats 5]

Builds a store (synthetic scores for real catalog env ids, so families and reward ranges are the
catalog's; game envs also get head-to-head matches), ranks it (``build_leaderboard``, default B=2000),
writes the site (``write_html``), then opens ``index.html`` from file:// in Debian's chromium through
playwright ``--repeats`` times, each in a fresh page, and reports the median and worst time from
navigation start to the page script finishing (``data-ready``, after sorting/filter/tooltip wiring)
and to the ``load`` event, and how long opening the full results table (closed above 300 rows) takes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from envsuite import catalog_reward_ranges, registry
from envsuite.leaderboard import (
    EpisodeResult,
    MatchResult,
    ResultKey,
    ResultStore,
    RunRecord,
    build_leaderboard,
    write_html,
)
from envsuite.registration import EnvKind

CHROMIUM = "/usr/bin/chromium"


def catalog_envs(n: int) -> list[tuple[str, tuple[float, float], bool]]:
    specs = [s for s in registry.all_specs() if not s.deprecated]
    if len(specs) < n:
        raise SystemExit(f"the catalog has {len(specs)} envs, fewer than --envs {n}")
    # Spread over families: the core envs first, then the namespaces in turn.
    specs.sort(key=lambda s: (s.namespace is not None, s.id))
    return [(s.id, s.reward_range, s.kind is EnvKind.GAME) for s in specs[:n]]


def fill_store(store: ResultStore, models: int, envs: int, episodes: int, seed: int) -> None:
    rng = random.Random(seed)
    skill = {f"model-{m:02d}": rng.random() for m in range(models)}
    for env_id, (lo, hi), is_game in catalog_envs(envs):
        difficulty = rng.random()
        for model, s in skill.items():
            key = ResultKey.create(
                model=model,
                env_id=env_id,
                renderer="chatml",
                sampling={"max_tokens": 64, "temperature": 0.7},
                seeds=range(episodes),
                package_version="0.1.0",
                partner="random" if is_game else "",
            )
            p = min(0.95, max(0.05, s - difficulty + 0.5))
            eps = [
                EpisodeResult(seed=i, reward=hi if rng.random() < p else lo, success=None)
                for i in range(episodes)
            ]
            store.add_run(RunRecord(key, f"{model}:{env_id}", reward_range=(lo, hi)), eps)
        if is_game:
            names = list(skill)
            store.add_matches(
                MatchResult.from_scores(
                    f"{env_id}:{i}",
                    env_id,
                    {a: skill[a] + rng.gauss(0, 0.3), b: skill[b] + rng.gauss(0, 0.3)},
                )
                for i, (a, b) in enumerate(rng.sample(names, 2) for _ in range(10))
            )


def measure(index: Path, repeats: int) -> tuple[list[float], list[float], list[float]]:
    ready: list[float] = []
    loaded: list[float] = []
    opened: list[float] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(index.resolve().as_uri(), wait_until="load", timeout=120_000)
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            timing = page.evaluate(
                """() => { const n = performance.getEntriesByType('navigation')[0];
                    return [Number(document.body.getAttribute('data-ready-ms')), n.loadEventEnd]; }"""
            )
            ready.append(timing[0] / 1000)
            loaded.append(timing[1] / 1000)
            # Opening the full results table (closed on big boards): until the next frame is drawn.
            opened.append(
                page.evaluate(
                    """async () => { const t0 = performance.now();
                        document.querySelector('details.results').open = true;
                        await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
                        return performance.now() - t0; }"""
                )
                / 1000
            )
            page.close()
        browser.close()
    return ready, loaded, opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--envs", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with ResultStore(Path(tmp) / "lb.sqlite") as store:
            started = time.perf_counter()
            fill_store(store, args.models, args.envs, args.episodes, args.seed)
            filled = time.perf_counter()
            ranges = catalog_reward_ranges(k.versioned_env_id for k in store.keys())  # noqa: SIM118  (a query, not a dict)
            board = build_leaderboard(store, catalog_ranges=ranges)
            built = time.perf_counter()
        report = write_html(Path(tmp) / "site", board)
        written = time.perf_counter()
        size = sum(p.stat().st_size for p in report.index.parent.rglob("*") if p.is_file())
        ready, loaded, opened = measure(report.index, args.repeats)
        index_mb = report.index.stat().st_size / 1e6
    print(
        f"store: {args.models} models x {args.envs} envs x {args.episodes} episodes: {filled - started:.1f} s"
    )
    print(
        f"build_leaderboard: {built - filled:.1f} s   write_html: {written - built:.1f} s   site: {size / 1e6:.1f} MB"
    )
    print(f"index.html {index_mb:.1f} MB, {len(board.entries)} result rows, {len(board.cells)} matrix cells")
    print(
        f"page script done (data-ready): median {statistics.median(ready):.2f} s, worst {max(ready):.2f} s; "
        f"load event: median {statistics.median(loaded):.2f} s, worst {max(loaded):.2f} s ({args.repeats} loads)"
    )
    print(f"opening the results table: median {statistics.median(opened):.2f} s, worst {max(opened):.2f} s")


if __name__ == "__main__":
    main()
