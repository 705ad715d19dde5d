"""The usage page: today's tokens as a bar, the range's totals, a table by model or key."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL


def test_a_reply_shows_on_the_usage_page(page: Page, lab_server):
    # A reply over the API, from the page's session, is in the record a staff user sees.
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2}  # fmt: skip
    assert page.request.post(f"{lab_server.url}/v1/chat/completions", data=body).ok
    page.goto("/usage/")
    expect(page.locator("#usage-totals")).to_have_text(
        re.compile(r"^[\d,]+ requests, [\d,]+ tokens")
    )
    bars = page.locator("#usage-chart svg g.usage-bar")
    expect(bars.last.locator("title")).to_contain_text("prompt,")
    assert bars.count() >= 1
    rows = page.locator("#usage-table tbody tr")
    expect(rows.filter(has_text=DEFAULT_MODEL)).to_have_count(1)
    page.select_option("#usage-group", "key")
    expect(rows.filter(has_text="the lab (session)")).to_have_count(1)  # its session calls
    page.fill("#usage-start", "2020-01-01")
    page.fill("#usage-end", "2020-01-31")
    page.click("#usage-form button[type=submit]")
    expect(page.locator("#usage-table tbody")).to_contain_text("No usage in this range.")
    assert bars.count() == 31  # every day of the range has its place
