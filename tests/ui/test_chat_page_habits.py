"""The chat page as people expect it: a visible max tokens, the keyboard (focus, Esc, one
tab stop per conversation), honest waiting while a model loads, confirmations and export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL, THINKING_MODEL
from tests.ui.lab_pages import api_post, delete_api_keys
from tests.ui.test_chat_page import pick_model, replies, send, set_params, wait_reply

CHAT_MAX_TOKENS = "2048"  # MLXLAB_CHAT_MAX_TOKENS's default; the API's stays unset


def test_defaults_focus_esc_and_one_tab_stop_per_conversation(page: Page):
    page.goto("/")
    expect(page.locator("#composer")).to_be_focused()  # type at once, no tabbing
    expect(page.locator("#model-picker")).to_have_attribute("data-details-for", DEFAULT_MODEL)
    expect(page.locator("#param-max_tokens")).to_have_value(CHAT_MAX_TOKENS)

    page.keyboard.type("Write a very long story about a dragon and a knight.")
    page.keyboard.press("Enter")
    expect(page.locator("#composer")).to_be_focused()  # ready for the next one
    expect(replies(page).last.locator(".content")).not_to_have_text("")
    page.keyboard.press("Escape")
    wait_reply(page)
    expect(replies(page).last.locator(".stats")).to_contain_text("cancelled")

    items = page.locator("#conversation-list li[data-id]")
    expect(items.first).to_be_visible()
    stops = page.evaluate(
        "[...document.querySelectorAll('#conversation-list button, #conversation-list a')]"
        ".filter((node) => node.tabIndex >= 0).length"
    )
    assert stops == items.count()


def test_the_reply_says_the_model_is_loading_and_counts_from_the_send(page: Page):
    page.goto("/models/")  # a page that sets the CSRF cookie; the model goes out first
    api_post(page, f"/api/models/{THINKING_MODEL}/unload")
    assert THINKING_MODEL not in page.request.get("/health").json()["models_loaded"]
    page.goto("/")
    pick_model(page, THINKING_MODEL)
    set_params(page, temperature=0, max_tokens=4)
    send(page, "Hello there")
    # At once: the message as sent, and a reply that says what it waits for.
    expect(page.locator(".message[data-role=user] .content")).to_have_text("Hello there")
    waiting = replies(page).last.locator(".waiting-note")
    expect(waiting).to_have_text(re.compile(rf"^Loading {THINKING_MODEL}… \d+ s$"))
    expect(waiting).to_have_text(re.compile(r"… [1-9]\d* s$"))  # the seconds go up
    wait_reply(page)
    expect(replies(page).last.locator(".waiting-note")).to_have_count(0)
    ttft = replies(page).last.locator("[data-stat=ttft]").text_content()
    # The time to the first token includes the load (seconds), not just the prefill.
    assert int(re.search(r"(\d+) ms", ttft).group(1)) >= 1000, ttft


def test_export_and_a_message_is_deleted_only_when_confirmed(page: Page, tmp_path: Path):
    page.goto("/")
    expect(page.locator("#export-menu")).to_be_hidden()  # a new chat has nothing to export
    pick_model(page, DEFAULT_MODEL)
    set_params(page, temperature=0, max_tokens=6)
    page.fill("#system-prompt", "Be brief.")
    send(page, "Name a colour for the export test.")
    wait_reply(page)
    answer = replies(page).last.locator(".content").text_content().strip()

    page.click("#export-menu summary")
    with page.expect_download() as download:
        page.click("#export-markdown")
    markdown = Path(download.value.path()).read_text()
    assert download.value.suggested_filename.endswith(".md")
    assert markdown.startswith("# Name a colour for the export test.")
    assert "## System\n\nBe brief." in markdown and "## You" in markdown
    assert answer.split()[0] in markdown
    page.click("#export-menu summary")
    with page.expect_download() as download:
        page.click("#export-json")
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported["model"] == DEFAULT_MODEL
    assert [m["role"] for m in exported["messages"]] == ["system", "user", "assistant"]
    assert exported["messages"][1]["content"] == "Name a colour for the export test."

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    replies(page).last.locator("[data-action=delete]").click()
    expect(replies(page)).to_have_count(1)  # dismissed: kept
    assert asked and "cannot be undone" in asked[0]
    page.once("dialog", lambda dialog: dialog.accept())
    replies(page).last.locator("[data-action=delete]").click()
    expect(replies(page)).to_have_count(0)


def test_keys_revoke_after_a_confirmation_hide_once_revoked_and_page(page: Page, lab_server):
    page.goto("/settings/")
    try:
        for number in range(11):
            api_post(page, "/api/keys", {"label": f"paging-{number:02d}"})
        check_the_keys_table(page)
    finally:
        delete_api_keys(lab_server, "paging-")


def check_the_keys_table(page: Page) -> None:
    page.reload()
    rows = page.locator("#keys-table tbody tr[data-id]")
    expect(rows).to_have_count(10)  # a page of keys
    expect(page.locator("#keys-page")).to_contain_text("Page 1 of")
    page.click("#keys-next")
    expect(page.locator("#keys-page")).to_contain_text("Page 2 of")
    page.click("#keys-prev")

    row = rows.filter(has_text="paging-10")
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.locator("[data-action=revoke]").click()
    expect(row.locator(".badge")).to_have_text("active")  # dismissed: nothing happened
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("[data-action=revoke]").click()
    expect(rows.filter(has_text="paging-10")).to_have_count(0)  # revoked keys are hidden
    page.check("#show-revoked")
    expect(rows.filter(has_text="paging-10").locator(".badge")).to_contain_text("revoked")
