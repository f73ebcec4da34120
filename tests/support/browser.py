"""A real Chromium (Debian's, never a downloaded one) driving the built dashboard: the browser,
a page per test that fails the test on any uncaught error in it, and screenshots in both
themes for test-artifacts/ (and, with STRATA_UPDATE_SCREENSHOTS=1, for docs/screenshots/)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from tests.support.strict import missing_dependency

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "frontend" / "dist"
ARTIFACTS = REPO / "test-artifacts" / "screenshots"
DOCS = REPO / "docs" / "screenshots"
# A test run leaves the committed screenshots alone unless asked to refresh them.
UPDATE_DOCS = os.environ.get("STRATA_UPDATE_SCREENSHOTS") == "1"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


def require_browser_and_dashboard() -> None:
    """Skip (a failure under STRATA_TEST_STRICT=1) without Chromium or a built dashboard."""
    if not CHROMIUM.is_file():
        missing_dependency(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    if not (DIST / "index.html").is_file():
        missing_dependency(
            f"the dashboard is not built ({DIST / 'index.html'} is missing): run `make ui` "
            "(npm ci and npm run build in frontend/)"
        )


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    require_browser_and_dashboard()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def watched_page(browser: Browser, timeout_ms: float = 20_000) -> Iterator[Page]:
    """A page in a fresh context (its own storage); an uncaught error in it fails the test."""
    context = browser.new_context(viewport=VIEWPORT, color_scheme="light")
    context.set_default_timeout(timeout_ms)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def set_theme(page: Page, theme: str) -> None:
    toggle = page.get_by_test_id("theme-toggle")
    if toggle.get_attribute("data-theme") != theme:
        toggle.click()
    page.wait_for_function("t => document.documentElement.dataset.theme === t", arg=theme)


def screenshots(page: Page, name: str) -> None:
    """<name>-light.png and <name>-dark.png, 1280x800, in test-artifacts (and docs)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for theme in ("light", "dark"):
        set_theme(page, theme)
        page.mouse.move(2, VIEWPORT["height"] - 2)  # no hover effect on the toggle
        page.wait_for_timeout(400)  # charts are redrawn with the theme's colours
        target = ARTIFACTS / f"{name}-{theme}.png"
        page.screenshot(path=str(target))
        if UPDATE_DOCS:
            shutil.copyfile(target, DOCS / target.name)
    set_theme(page, "light")


def number(page: Page, selector: str, attribute: str) -> int:
    value = page.locator(selector).first.get_attribute(attribute)
    return int(value or 0)


def wait_number_above(page: Page, selector: str, attribute: str, floor: int, timeout: float) -> int:
    """Wait until the first `selector`'s numeric `attribute` exceeds `floor`; return it."""
    page.wait_for_function(
        """([selector, attribute, floor]) => {
            const element = document.querySelector(selector);
            return element !== null && Number(element.getAttribute(attribute)) > floor;
        }""",
        arg=[selector, attribute, floor],
        timeout=timeout * 1000,
    )
    return number(page, selector, attribute)
