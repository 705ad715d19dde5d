"""Debian's headless Chromium, driven by Playwright, against the session's live server."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def browser() -> Browser:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/")
    expect(page).to_have_url(f"{url}/login/?next=/")
    page.fill("#id_username", LAB_USER)
    page.fill("#id_password", LAB_PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/")


@pytest.fixture(scope="session")
def session_state(browser, lab_server, tmp_path_factory) -> str:
    """A logged-in browser state, saved once for every test's fresh context."""
    context = browser.new_context()
    page = context.new_page()
    log_in(page, lab_server.url)
    path = tmp_path_factory.mktemp("browser") / "state.json"
    context.storage_state(path=str(path))
    context.close()
    return str(path)


@pytest.fixture
def page(browser, session_state, lab_server) -> Page:
    context = browser.new_context(
        storage_state=session_state,
        base_url=lab_server.url,
        viewport={"width": 1400, "height": 900},
    )
    context.set_default_timeout(60_000)  # a reply on this CPU takes seconds, not milliseconds
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def screenshot(request):
    """Save a page's picture under docs/screenshots/ when run with --screenshots."""

    def take(page: Page, name: str) -> None:
        if request.config.getoption("--screenshots"):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))

    return take
