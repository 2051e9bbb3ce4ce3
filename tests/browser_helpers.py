"""Pages rendered in a real headless Chromium (Debian's `chromium`, installed by `.ci/run`),
driven by playwright, so tests assert on what a person sees, not on the HTML source.

The browser is Debian's binary, never one playwright downloads (this project's machines reach
no CDN). Every request the page makes is recorded, so a test can assert that nothing left the
file. A missing browser fails the test with one sentence: a browser test that skips would be
counted as passing.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
# flags of a headless run as root on a machine with no outside network: without the
# background-networking ones Chromium keeps trying to reach Google's hosts
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@dataclass
class Rendered:
    """A page opened in the browser, and every URL it asked for (the file itself first)."""

    page: Any  # playwright.sync_api.Page
    requests: list[str] = field(default_factory=list)

    def text(self) -> str:
        """What a person reads: the rendered text of the body (closed <details> included)."""
        return str(self.page.evaluate("document.body.textContent"))

    def outside_requests(self, path: Path) -> list[str]:
        """Requests for anything but the page's own file."""
        return [url for url in self.requests if url != path.resolve().as_uri()]


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (playwright Browser); fails the test when it is not installed."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"browser tests need Debian's chromium at {CHROMIUM}: "
                    "`apt-get install -y chromium` (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def rendered(browser: Any, path: Path, screenshot: Path | None = None) -> Iterator[Rendered]:
    """`path` opened in a new page of `browser`; a full-page screenshot to `screenshot`."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = Rendered(page)
    page.on("request", lambda request: seen.requests.append(request.url))
    try:
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("load")
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        yield seen
    finally:
        page.close()
