"""Audio on the chat page in a real browser: a clip attached through the file picker or a
drop, sent to the tiny Gemma 3n (tests/audio_models.py) on the session's server, played
back from the conversation after a reload; refused, in the server's words, by a model that
does not take audio."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.audio_models import wav
from tests.conftest import DEFAULT_MODEL
from tests.ui.test_chat_images import attached, give, prompt_tokens
from tests.ui.test_chat_page import open_chat, pick_model, send, set_params, wait_reply
from tests.ui.test_content_security_policy import refusals
from tests.vision_models import png

QUESTION = "What do you hear?"
CLIP = wav(0.5, seed=1)  # 188 soft tokens, as any clip (Gemma 3n's audio tower)
SOFT_TOKENS = 188

# Resolves with the player's duration once its metadata loaded; rejects if it cannot load.
PLAYED = """
(node) => new Promise((resolve, reject) => {
  if (node.readyState >= 1) return resolve(node.duration);
  node.addEventListener('loadedmetadata', () => resolve(node.duration), { once: true });
  node.addEventListener('error', () => reject(new Error(`audio error ${node.error?.code}`)), { once: true });
})
"""


def attach_clip(page: Page, name: str = "tone.wav") -> None:
    page.set_input_files("#attach-input", files=[{"name": name, "mimeType": "audio/wav", "buffer": CLIP}])  # fmt: skip


def test_an_attached_clip_goes_to_the_model_and_plays_from_the_conversation(
    page: Page, gemma3n_model
):
    refused = refusals(page)
    open_chat(page, gemma3n_model)
    expect(page.locator("#attach-button")).to_have_attribute("aria-disabled", "false")
    set_params(page, temperature=0, max_tokens=4)
    attach_clip(page)
    expect(attached(page)).to_have_count(1)
    expect(attached(page)).to_have_class(re.compile("attachment-audio"))
    send(page, QUESTION)
    wait_reply(page)
    expect(attached(page)).to_have_count(0)
    player = page.locator(".message[data-role=user] .message-attachments audio.message-audio")
    expect(player).to_have_attribute("src", re.compile(r"^/api/messages/\d+/attachments/0$"))
    with_audio = prompt_tokens(page)

    page.reload()
    expect(player).to_have_count(1)
    assert abs(player.evaluate(PLAYED) - 0.5) < 0.01  # served, and allowed by the policy

    # The same words without the clip: its soft tokens were the difference.
    page.click("#new-chat")
    pick_model(page, gemma3n_model)  # a new chat starts on the default model
    set_params(page, temperature=0, max_tokens=4)
    send(page, QUESTION)
    wait_reply(page)
    assert with_audio >= prompt_tokens(page) + SOFT_TOKENS
    assert refused == []


def test_a_dropped_clip_is_taken_and_an_image_refused_in_the_servers_words(
    page: Page, gemma3n_model
):
    open_chat(page, gemma3n_model)
    give(page, "drop", "dropped.wav", CLIP, "audio/wav")
    expect(attached(page)).to_have_count(1)
    expect(attached(page)).to_contain_text("dropped.wav")
    give(page, "paste", "picture.png", png(56, 56, seed=5))
    expect(page.locator("#chat-error")).to_contain_text(
        f"model '{gemma3n_model}' does not accept image input"
    )
    expect(attached(page)).to_have_count(1)


def test_a_text_only_model_refuses_audio_in_the_servers_words(page: Page, gemma3n_model):
    refusal = f"model '{DEFAULT_MODEL}' does not accept audio input"
    open_chat(page, DEFAULT_MODEL)
    expect(page.locator("#attach-button")).to_have_attribute("aria-disabled", "true")
    attach_clip(page)
    expect(page.locator("#chat-error")).to_contain_text(refusal)
    expect(attached(page)).to_have_count(0)

    # Attached for Gemma 3n, then a model of text only picked: the page says so, and the
    # server refuses the send in those words; text and clip come back to the composer.
    open_chat(page, gemma3n_model)
    attach_clip(page)
    expect(attached(page)).to_have_count(1)
    page.select_option("#model-picker", DEFAULT_MODEL)
    expect(page.locator("#attachment-note")).to_contain_text(refusal)
    send(page, "Hello")
    expect(page.locator("#chat-error")).to_contain_text(refusal)
    expect(attached(page)).to_have_count(1)
    expect(page.locator("#composer")).to_have_value("Hello")
    expect(page.locator(".message")).to_have_count(0)
