"""The lab's pages under their Content-Security-Policy in a real browser: nothing refused,
and each page still does its work (the chat's websocket, the API docs' Swagger UI)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL
from tests.ui.test_chat_page import open_chat, send, set_params, wait_reply

PAGES = ["/", "/side-by-side/", "/models/", "/usage/", "/settings/", "/jobs/", "/admin/",
         "/api/docs/"]  # fmt: skip


def refusals(page: Page) -> list[str]:
    """Chromium reports each thing the policy refused on the console."""
    found: list[str] = []
    page.on(
        "console",
        lambda message: (
            found.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return found


def test_no_page_breaks_the_policy(page: Page):
    refused = refusals(page)
    for path in PAGES:
        response = page.goto(path)
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("MLX Lab API")
    assert refused == []


def test_a_chat_streams_under_the_policy(page: Page):
    refused = refusals(page)
    open_chat(page, DEFAULT_MODEL)
    set_params(page, temperature=0, max_tokens=8)
    send(page, "What is the capital of France?")
    wait_reply(page)
    expect(page.locator(".message[data-role=assistant]").last).not_to_be_empty()
    assert refused == []
