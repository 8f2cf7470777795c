"""Debian's headless Chromium driven by Playwright, for the console's browser tests.

Playwright never downloads a browser here: it drives /usr/bin/chromium (`scripts/servers.sh
prepare chromium` installs it). Screenshots go to $SLUICE_ARTIFACTS (default
tests/artifacts/console/).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.worker_process import REPO

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("SLUICE_ARTIFACTS", REPO / "tests" / "artifacts")) / "console"
VIEWPORT = {"width": 1366, "height": 800}
EXPECT_TIMEOUT_MS = 60_000


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's `Browser`), closed on exit."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import expect, sync_playwright

    # a page's assertions wait for the worker's answers (a pause stops a Spark query): on a
    # loaded 2-core machine that takes longer than Playwright's default 5 s
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)

    assert Path(CHROMIUM).exists(), "Chromium missing: scripts/servers.sh prepare chromium"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, **context: Any) -> Any:
    """A page in a new browser context (its own cookies, credentials and storage)."""
    page = browser.new_context(viewport=VIEWPORT, **context).new_page()
    page.set_default_timeout(60_000)
    return page


def screenshot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
