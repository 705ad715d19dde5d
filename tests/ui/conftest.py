"""Browser tests against the session's live server."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser import log_in


@pytest.fixture(scope="module")
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
