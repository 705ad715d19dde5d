"""The models page's "Get a model" panel in Chromium, against the live lab, its Celery worker
and the Hub stand-in: search, pull with live progress, chat with the pulled model, update it
from a newer commit, delete it."""

from __future__ import annotations

import json
import re
import struct

from playwright.sync_api import Page, expect

REPO = "mlx-community/tiny-page-test"
NAME = "tiny-page-test"  # the pull's default name: the repo's, lower-cased
# An architecture neither mlx-lm nor mlx-embeddings loads.
WHISPER_REPO = "openai/tiny-page-whisper"
# Slow enough that the ~13 MB download takes a few seconds, so its progress can be seen.
THROTTLE = 4_000_000


def tiny_safetensors() -> bytes:
    """A valid safetensors file holding one 2x2 float16 tensor of zeros."""
    header = json.dumps({"weight": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}})
    return struct.pack("<Q", len(header)) + header.encode() + bytes(8)


def seed_repos(hub, tiny_model_folder) -> None:
    files = {path.name: path.read_bytes() for path in tiny_model_folder.iterdir() if path.is_file()}
    hub.add_model_repo(REPO, files, library_name="mlx", downloads=12, likes=3)
    whisper_config = {
        "model_type": "whisper",
        "architectures": ["WhisperForConditionalGeneration"],
        "d_model": 4,
    }
    whisper_files = {
        "config.json": json.dumps(whisper_config).encode(),
        "model.safetensors": tiny_safetensors(),
    }
    hub.add_model_repo(WHISPER_REPO, whisper_files, library_name="transformers")


def models_row(page: Page, name: str):
    return page.locator(f"#models-table tr[data-name='{name}']")


def test_search_pull_chat_update_and_delete(staff_page: Page, hub, tiny_model_folder):
    seed_repos(hub, tiny_model_folder)
    page = staff_page
    page.on("dialog", lambda dialog: dialog.accept())  # the delete's confirm()
    page.goto("/models/")
    page.fill("#hub-search", "tiny-page")
    page.click("#hub-search-button")

    mlx = page.locator(f".hub-result[data-repo='{REPO}']")
    expect(mlx.locator(".hub-servable .badge")).to_have_text("servable")
    expect(mlx.locator(".hub-meta")).to_contain_text(re.compile(r"size [\d.]+ MB"))
    expect(mlx.locator(".hub-result-head")).to_contain_text("mlx")
    whisper = page.locator(f".hub-result[data-repo='{WHISPER_REPO}']")
    expect(whisper.locator(".hub-servable")).to_contain_text("not servable")
    expect(whisper.locator(".hub-reason")).to_contain_text("whisper")
    expect(whisper.get_by_role("button", name="Pull")).to_be_disabled()

    # A phone's width: the panel's cards wrap instead of overflowing.
    page.set_viewport_size({"width": 390, "height": 844})
    panel = page.locator("#hub-panel")
    assert panel.evaluate("el => el.scrollWidth - el.clientWidth") <= 0
    page.set_viewport_size({"width": 1400, "height": 900})

    hub.throttle_bytes_per_second = THROTTLE
    try:
        mlx.get_by_role("button", name="Pull").click()
        pull = page.locator(".pull-item").first
        expect(pull.locator(".pull-label")).to_have_text(REPO)
        expect(pull.locator(".pull-message")).to_contain_text("MB of")
        expect(pull.locator(".pull-eta")).to_contain_text("left")
        expect(pull.get_by_role("button", name="Cancel")).to_be_visible()
        page.wait_for_function(
            "() => { const bar = document.querySelector('.pull-item progress');"
            " return bar && bar.value > 0 && bar.value < 1; }"
        )
        chat = pull.get_by_role("link", name="Chat with it")
        expect(chat).to_be_visible(timeout=120_000)
    finally:
        hub.throttle_bytes_per_second = None
    expect(pull.locator(".status-badge")).to_have_text("succeeded")
    expect(models_row(page, NAME)).to_contain_text(REPO)  # the table was refreshed

    chat.click()
    expect(page).to_have_url(re.compile(rf"/\?model={NAME}$"))
    expect(page.locator("#model-picker")).to_have_attribute("data-details-for", NAME)
    page.fill("#param-max_tokens", "8")
    page.fill("#composer", "Hello")
    page.click("#send-button")
    reply = page.locator(".message[data-role=assistant]").last
    # The first reply also loads the model on the server.
    expect(reply).to_have_attribute("data-id", re.compile(r"\d+"), timeout=120_000)
    expect(page.locator("#chat-error")).to_be_hidden()
    expect(reply.locator(".stats")).to_contain_text("tokens")
    expect(reply.locator(".content")).to_have_text(re.compile(r"\S"))  # nonsense, but text
    expect(reply.locator(".empty-note")).to_have_count(0)  # not the "(empty reply)" note

    page.goto("/models/")
    row = models_row(page, NAME)
    expect(row.locator(".disk")).to_contain_text("MB")
    row.get_by_role("button", name="Check for update").click()
    expect(row.locator(".repo-line")).to_contain_text("up to date")
    newer = hub.update_model_repo(REPO, {"README.md": b"# tiny\n"})
    row.get_by_role("button", name="Check again").click()
    expect(row.locator(".repo-line")).to_contain_text("Update available")
    row.get_by_role("button", name="Update", exact=True).click()
    update = page.locator(".pull-item").first
    expect(update.locator(".pull-label")).to_contain_text(f"{NAME} (update from {REPO})")
    expect(update.locator(".status-badge")).to_have_text("succeeded", timeout=60_000)
    models = page.request.get("/api/models").json()["results"]
    assert [m["commit"] for m in models if m["name"] == NAME] == [newer]
    expect(row.locator(".loaded")).to_contain_text("loaded")
    row.get_by_role("button", name="Delete").click()
    expect(page.locator("#models-error")).to_contain_text("unload it first")
    row.get_by_role("button", name="Unload").click()
    expect(row.locator(".loaded")).not_to_contain_text("loaded")
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    expect(page.locator("#models-status")).to_contain_text(f"Deleted {NAME}")
