"""Debian's headless Chromium driven by Playwright: shared by the UI and job page tests."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import LAB_PASSWORD, LAB_USER, ROOT

CHROMIUM = os.environ.get("MLXLAB_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling Google, which this
# offline machine refuses; the sandbox needs privileges a test runner may not have.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "docs" / "screenshots"


# Per module: Playwright's sync API keeps an event loop running in the main thread,
# which later in-process Django tests (async_to_sync, asyncio.run) must not find.
@pytest.fixture(scope="module")
def browser() -> Browser:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def page_in(
    browser: Browser, session_state: str, url: str, viewport: dict, *, check_errors: bool = True
) -> Iterator[Page]:
    """A page of a fresh logged-in context at `viewport`; with `check_errors`, a JavaScript
    error on it fails the test once it is done."""
    context = browser.new_context(storage_state=session_state, base_url=url, viewport=viewport)
    context.set_default_timeout(60_000)  # a reply on this CPU takes seconds, not milliseconds
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not (check_errors and errors), f"JavaScript errors on the page: {errors}"


def log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/")
    expect(page).to_have_url(f"{url}/login/?next=/")
    page.fill("#id_username", LAB_USER)
    page.fill("#id_password", LAB_PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/")


@pytest.fixture
def screenshot(request):
    """Save a page's picture under docs/screenshots/ when run with --screenshots."""

    def take(page: Page, name: str) -> None:
        if request.config.getoption("--screenshots"):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))

    return take


@pytest.fixture
def staff_page(browser, jobs_lab) -> Page:
    """A logged-in staff page on the jobs lab (Daphne with a real worker)."""
    context = browser.new_context(base_url=jobs_lab.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, jobs_lab.url)
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
