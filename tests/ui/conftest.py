"""Browser tests against the session's live server."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser import log_in, page_in


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
    with page_in(browser, session_state, lab_server.url, {"width": 1400, "height": 900}) as page:
        yield page
