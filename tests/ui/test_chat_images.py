"""Images on the chat page in a real browser: attached through the file picker, a paste or
a drop, sent to the tiny vision model (tests/vision_models.py) on the session's server,
kept with the conversation; refused, in the server's words, for a model of text only."""

from __future__ import annotations

import base64
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import page_in
from tests.conftest import DEFAULT_MODEL
from tests.ui.test_chat_page import open_chat, pick_model, send, set_params, wait_reply
from tests.ui.test_content_security_policy import refusals
from tests.ui.test_phone_layout import PHONE, page_width
from tests.vision_models import png

QUESTION = "What is in this picture?"
PICTURE = png(112, 84, seed=21)  # 12 placeholder tokens once merged into 28-pixel patches

# Dispatches a real paste (on the composer) or drop (on its form) of one file.
GIVE_FILE = """
([kind, name, type, base64]) => {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type }));
  const options = { bubbles: true, cancelable: true };
  if (kind === 'paste') {
    const event = new ClipboardEvent('paste', { ...options, clipboardData: transfer });
    return document.querySelector('#composer').dispatchEvent(event);
  }
  const form = document.querySelector('#composer-form');
  form.dispatchEvent(new DragEvent('dragover', { ...options, dataTransfer: transfer }));
  return form.dispatchEvent(new DragEvent('drop', { ...options, dataTransfer: transfer }));
}
"""


def give(page: Page, kind: str, name: str = "picture.png", data: bytes = PICTURE,
         mime: str = "image/png") -> None:  # fmt: skip
    page.evaluate(GIVE_FILE, [kind, name, mime, base64.b64encode(data).decode()])


def attached(page: Page):
    return page.locator("#attachments .attachment")


def prompt_tokens(page: Page) -> int:
    stats = page.locator(".message[data-role=assistant] [data-stat=tokens]").last.inner_text()
    return int(re.search(r"prompt (\d+)", stats).group(1))


def test_an_attached_image_goes_to_the_model_and_stays_with_the_conversation(
    page: Page, vision_model, screenshot
):
    refused = refusals(page)
    open_chat(page, vision_model)
    set_params(page, temperature=0, max_tokens=4)
    page.set_input_files(
        "#attach-input", files=[{"name": "noise.png", "mimeType": "image/png", "buffer": PICTURE}]
    )
    expect(attached(page)).to_have_count(1)
    send(page, QUESTION)
    wait_reply(page)
    expect(attached(page)).to_have_count(0)
    thumbnail = page.locator(".message[data-role=user] .message-attachments a.message-image")
    expect(thumbnail).to_have_attribute("href", re.compile(r"^/api/messages/\d+/attachments/0$"))
    with_image = prompt_tokens(page)
    give(page, "paste", "next.png", png(56, 56, seed=23))  # pending in the composer
    screenshot(page, "chat-images")

    page.reload()
    expect(thumbnail).to_have_count(1)
    image = thumbnail.locator("img")
    expect(image).to_have_js_property("complete", True)
    assert image.evaluate("(node) => node.naturalWidth") == 112
    with page.context.expect_page() as opened:
        thumbnail.click()
    full = opened.value
    full.wait_for_load_state()
    assert re.search(r"/api/messages/\d+/attachments/0$", full.url)
    full.close()

    # The same words without the picture: its placeholders were the difference.
    page.click("#new-chat")
    pick_model(page, vision_model)  # a new chat starts on the default model
    set_params(page, temperature=0, max_tokens=4)
    send(page, QUESTION)
    wait_reply(page)
    assert with_image >= prompt_tokens(page) + 12
    assert refused == []


def test_paste_and_drop_attach_images_and_each_can_be_removed(page: Page, vision_model):
    open_chat(page, vision_model)
    give(page, "paste")
    give(page, "drop", "other.png", png(56, 56, seed=22))
    expect(attached(page)).to_have_count(2)
    expect(attached(page).locator("img").first).to_have_attribute(
        "src", re.compile("^data:image/png;base64,")
    )
    page.click("#attachments .attachment-remove >> nth=0")
    expect(attached(page)).to_have_count(1)
    expect(attached(page)).to_have_attribute("title", re.compile("^other.png"))
    give(page, "drop", "notes.txt", b"plain text", "text/plain")
    expect(page.locator("#chat-error")).to_contain_text(
        "notes.txt is not a PNG, JPEG or WebP image"
    )
    expect(attached(page)).to_have_count(1)


def test_a_text_only_model_refuses_images_in_the_servers_words(page: Page, vision_model):
    refusal = f"model '{DEFAULT_MODEL}' does not accept image input"
    open_chat(page, DEFAULT_MODEL)
    expect(page.locator("#attach-button")).to_have_attribute("aria-disabled", "true")
    give(page, "paste")
    expect(page.locator("#chat-error")).to_contain_text(refusal)
    expect(attached(page)).to_have_count(0)

    # Attached for a vision model, then a model of text only picked: the page says so, and
    # the server refuses the send; text and image come back to the composer. The picture is
    # past Daphne's own 1 MiB websocket bound, which the lab raises to a request body's.
    open_chat(page, vision_model)
    large = png(720, 720, seed=24)
    assert len(large) > 1024 * 1024
    give(page, "paste", "large.png", large)
    page.select_option("#model-picker", DEFAULT_MODEL)
    expect(page.locator("#attachment-note")).to_contain_text(refusal)
    expect(page.locator("#chat-error")).to_be_hidden()
    send(page, "Hello")
    expect(page.locator("#chat-error")).to_contain_text(refusal)
    expect(attached(page)).to_have_count(1)
    expect(page.locator("#composer")).to_have_value("Hello")
    expect(page.locator(".message")).to_have_count(0)


@pytest.fixture
def phone(browser, session_state, lab_server) -> Page:
    with page_in(browser, session_state, lab_server.url, PHONE, check_errors=False) as page:
        yield page


def test_images_fit_a_phone(phone: Page, vision_model):
    phone.goto(f"/?model={vision_model}")
    expect(phone.locator("#model-picker")).to_have_attribute("data-details-for", vision_model)
    for seed in range(4):
        give(phone, "paste", f"p{seed}.png", png(56, 56, seed=seed))
    expect(attached(phone)).to_have_count(4)
    phone.click("#toggle-settings")  # a drawer on a phone
    set_params(phone, temperature=0, max_tokens=4)
    phone.click("#close-settings")
    send(phone, "Which one?")
    wait_reply(phone)
    expect(phone.locator(".message[data-role=user] .message-image")).to_have_count(4)
    expect(phone.locator("#attach-button")).to_be_in_viewport()
    scroll_width, client_width = page_width(phone)
    assert scroll_width <= client_width
