"""Headless Debian chromium for page tests, through playwright (never a downloaded browser).

`make install` puts chromium at /usr/bin/chromium and playwright's Python package in the venv;
without them the tests that need a browser skip, saying why. Tests never install anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


def launch_browser() -> Iterator[Any]:
    """A chromium browser for a test module (a generator for a pytest fixture)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: `make install` installs Debian's chromium (needs root or sudo)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is installed by `make install`")
    with sync_api.sync_playwright() as p:
        # --no-sandbox: tests run as root in containers, where chromium's sandbox cannot start.
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()
