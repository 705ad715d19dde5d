"""The chat page in a real browser, on the real model."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL, THINKING_MODEL

# Records the last reply's text length each time it changes while a reply is running.
WATCH_STREAM = """
window.__lengths = [];
new MutationObserver(() => {
  const replies = document.querySelectorAll('.message[data-role=assistant] .content');
  const last = replies[replies.length - 1];
  if (last && document.body.dataset.generating === 'true') {
    window.__lengths.push(last.textContent.length);
  }
}).observe(document.body, {subtree: true, childList: true, characterData: true});
"""


def open_chat(page: Page, model: str = DEFAULT_MODEL) -> None:
    page.goto("/")
    expect(page.locator(f"#model-picker option[value='{model}']")).to_have_count(1)
    pick_model(page, model)
    expect(page.locator("body")).to_have_attribute("data-generating", "false")


def pick_model(page: Page, model: str) -> None:
    page.select_option("#model-picker", model)
    # The model's defaults fill the fields when its details arrive; typing waits for them.
    expect(page.locator("#model-picker")).to_have_attribute("data-details-for", model)


def set_params(page: Page, **params) -> None:
    for name, value in params.items():
        page.fill(f"#param-{name}", str(value))


def send(page: Page, text: str) -> None:
    page.fill("#composer", text)
    page.click("#send-button")


def wait_reply(page: Page) -> None:
    expect(page.locator("body")).to_have_attribute("data-generating", "false", timeout=120_000)
    expect(page.locator(".message[data-role=assistant]").last).to_have_attribute(
        "data-id", re.compile(r"\d+")
    )


def replies(page: Page):
    return page.locator(".message[data-role=assistant]")


def test_a_wrong_password_is_refused(browser, lab_server):
    context = browser.new_context(base_url=lab_server.url)
    page = context.new_page()
    page.goto("/models/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/models/$"))
    page.fill("#id_username", "tester")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    expect(page.locator("body")).to_contain_text("enter a correct username and password")
    context.close()


def test_tokens_stream_in_and_the_conversation_survives_a_reload(page, screenshot):
    open_chat(page)
    set_params(page, temperature=0, max_tokens=12)
    page.fill("#system-prompt", "You are a helpful assistant.")
    page.evaluate(WATCH_STREAM)
    send(page, "What is the capital of France?")
    expect(page.locator("body")).to_have_attribute("data-generating", "true")
    wait_reply(page)
    lengths = [n for n in page.evaluate("window.__lengths") if n > 0]
    assert len(set(lengths)) >= 2, lengths  # the text grew while the reply ran
    reply = replies(page).last
    expect(reply.locator(".content")).to_contain_text("Paris")
    expect(reply.locator("[data-stat=ttft]")).to_contain_text(re.compile(r"\d"))
    expect(reply.locator("[data-stat=tps]")).to_contain_text(re.compile(r"\d"))
    expect(reply.locator("[data-stat=tokens]")).to_contain_text(re.compile(r"\d+ tokens"))
    screenshot(page, "chat")
    entry = page.locator("#conversation-list li", has_text="What is the capital of France?")
    expect(entry).to_have_count(1)

    page.goto("/")
    entry = page.locator("#conversation-list li", has_text="What is the capital of France?")
    entry.first.click()
    expect(page.locator(".message[data-role=user] .content")).to_have_text(
        "What is the capital of France?"
    )
    expect(replies(page).last.locator(".content")).to_contain_text("Paris")
    expect(page.locator("#system-prompt")).to_have_value("You are a helpful assistant.")

    page.fill("#conversation-search", "capital of France")
    expect(page.locator("#conversation-list li").first).to_contain_text("capital of France")
    page.fill("#conversation-search", "no conversation says this")
    expect(page.locator("#conversation-list li")).to_have_count(0)


def test_stop_ends_a_long_reply_and_frees_the_slot(page):
    open_chat(page)
    set_params(page, max_tokens=400)
    send(page, "Write a very long story about a dragon and a knight.")
    expect(page.locator("#stop-button")).to_be_visible()
    expect(replies(page).last.locator(".content")).not_to_have_text("")
    page.click("#stop-button")
    wait_reply(page)
    expect(replies(page).last.locator(".stats")).to_contain_text("cancelled")
    for _ in range(50):  # the engine drops the row at its next step
        in_flight = page.request.get("/health").json()["in_flight"]
        if in_flight == 0:
            break
        page.wait_for_timeout(100)
    assert in_flight == 0


def test_regenerate_replaces_the_last_reply(page):
    open_chat(page)
    set_params(page, temperature=0, max_tokens=5)
    send(page, "Say hello.")
    wait_reply(page)
    first = replies(page).last.get_attribute("data-id")
    replies(page).last.locator("[data-action=regenerate]").click()
    expect(page.locator("body")).to_have_attribute("data-generating", "true")
    wait_reply(page)
    expect(replies(page)).to_have_count(1)
    assert replies(page).last.get_attribute("data-id") != first


def test_thinking_switch_and_model_switch(page):
    open_chat(page, THINKING_MODEL)
    toggle = page.locator("#thinking-toggle")
    expect(toggle).to_be_visible()
    toggle.check()
    set_params(page, temperature=0, max_tokens=8)
    send(page, "Hi")
    wait_reply(page)
    expect(replies(page).last.locator("details.reasoning")).to_have_count(1)

    page.click("#new-chat")
    pick_model(page, THINKING_MODEL)
    expect(toggle).to_be_visible()
    toggle.uncheck()
    set_params(page, temperature=0, max_tokens=8)
    send(page, "Hi")
    wait_reply(page)
    expect(replies(page).last.locator("details.reasoning")).to_have_count(0)

    pick_model(page, DEFAULT_MODEL)
    expect(toggle).to_be_hidden()


def test_the_field_being_typed_in_keeps_its_text_when_the_defaults_arrive(page):
    open_chat(page)
    field = page.locator("#param-max_tokens")
    expect(field).not_to_have_value("")  # the model's default filled it
    field.focus()
    # Emptied with no input event: only the focus tells it from an untouched field.
    page.evaluate("document.getElementById('param-max_tokens').value = ''")
    page.evaluate(
        "(name) => { const picker = document.getElementById('model-picker');"
        " picker.value = name; picker.dispatchEvent(new Event('change')); }",
        THINKING_MODEL,
    )
    expect(page.locator("#model-picker")).to_have_attribute("data-details-for", THINKING_MODEL)
    expect(field).to_have_value("")
    page.locator("#param-temperature").focus()
    pick_model(page, DEFAULT_MODEL)  # once typing moved on, the untouched field follows the model
    expect(field).not_to_have_value("")


def test_drafts_by_prompt_lookup_from_the_settings_panel(page):
    open_chat(page)
    drafts = page.locator("#param-draft_model")
    expect(drafts.locator(f"option[value='{THINKING_MODEL}']")).to_have_count(1)
    drafts.select_option("ngram")
    set_params(page, temperature=0, max_tokens=16, num_draft_tokens=4)
    send(page, "Repeat this sentence exactly: the quick brown fox jumps over the lazy dog.")
    wait_reply(page)
    expect(replies(page).last.locator("[data-stat=drafts]")).to_contain_text(
        re.compile(r"drafts \d+/[1-9]\d* kept")
    )
    page.reload()  # the conversation remembers where its drafts come from
    page.locator("#conversation-list li", has_text="the quick brown fox").first.click()
    expect(drafts).to_have_value("ngram")
    expect(page.locator("#param-num_draft_tokens")).to_have_value("4")
