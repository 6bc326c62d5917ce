"""Screenshots of a leaderboard page (desktop and phone width) in headless Debian chromium.

    .venv/bin/python bench/leaderboard_screenshots.py runs/demo/leaderboard --out docs/img

Serves the folder on 127.0.0.1 (as a static host would), opens it with playwright driving
/usr/bin/chromium, and writes ``leaderboard_desktop.png`` (1400 px wide) and ``leaderboard_narrow.png``
(390 px, a phone) plus the first model page at desktop width.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

from envsuite.leaderboard import start_server

CHROMIUM = "/usr/bin/chromium"
SHOTS = (("leaderboard_desktop.png", 1400, 900), ("leaderboard_narrow.png", 390, 844))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page_dir", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument(
        "--full-page", action="store_true", help="capture the whole page, not the first screen"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    server = start_server(args.page_dir)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            for name, width, height in SHOTS:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"{base}/index.html")
                page.wait_for_selector("body[data-ready='1']")
                cell = page.locator("#matrix td.cell[data-tip]").first
                if cell.count():
                    cell.hover()  # show a cell's interval, as a reader would
                page.screenshot(path=str(args.out / name), full_page=args.full_page)
                print(f"wrote {args.out / name}")
                page.close()
            model = next(iter(sorted((args.page_dir / "models").glob("*.html"))), None)
            if model is not None:
                page = browser.new_page(viewport={"width": 1400, "height": 700})
                page.goto(f"{base}/models/{model.name}")
                page.wait_for_selector("body[data-ready='1']")
                page.screenshot(path=str(args.out / "leaderboard_model.png"))
                print(f"wrote {args.out / 'leaderboard_model.png'}")
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
