"""The models page in a real browser: the registry, details, load/unload, GGUF import, drain
and worker events, mounting adapters."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from inference.management.commands.ensure_default_model import embedded_gguf
from tests.adapter_files import register_adapter, write_adapter
from tests.conftest import DEFAULT_MODEL, THINKING_MODEL


def row(page: Page, name: str):
    return page.locator(f"#models-table tr[data-name='{name}']")


def test_registry_details_and_unload_load(page: Page, screenshot):
    page.goto("/models/")
    expect(row(page, DEFAULT_MODEL)).to_contain_text("llama")
    expect(row(page, DEFAULT_MODEL)).to_contain_text("8192")
    expect(row(page, DEFAULT_MODEL).locator(".loaded")).to_contain_text("loaded")
    screenshot(page, "models")
    row(page, DEFAULT_MODEL).locator("[data-action=details]").click()
    details = page.locator("#model-details")
    expect(details).to_be_visible()
    expect(details.locator(".config")).to_contain_text('"model_type": "llama"')
    expect(details.locator(".chat-template")).to_contain_text("<|im_start|>")
    page.keyboard.press("Escape")

    thinking = row(page, THINKING_MODEL)
    load, unload = thinking.locator("[data-action=load]"), thinking.locator("[data-action=unload]")
    if "loaded" in thinking.locator(".loaded").text_content():  # an earlier test loaded it
        unload.click()
        expect(thinking.locator(".loaded")).not_to_contain_text("loaded")
    expect(unload).to_be_disabled()  # each button only where it applies
    load.click()
    # A real load: a model worker starts, seconds on this CPU.
    expect(thinking.locator(".loaded")).to_contain_text("loaded", timeout=60_000)
    expect(load).to_be_disabled()
    unload.click()
    expect(thinking.locator(".loaded")).not_to_contain_text("loaded")
    expect(load).to_be_enabled()
    health = page.request.get("/health").json()
    assert THINKING_MODEL not in health["models_loaded"]


def test_import_a_gguf_from_the_page(page: Page):
    page.goto("/models/")
    page.fill("#import-path", "/no/such/model.gguf")
    page.click("#import-button")
    expect(page.locator("#import-error")).to_contain_text(
        "path must name a .gguf file inside MLXLAB_IMPORT_ROOTS"
    )

    page.fill("#import-path", str(embedded_gguf()))
    page.fill("#import-name", "smol-imported")
    page.click("#import-button")
    expect(row(page, "smol-imported")).to_contain_text("llama", timeout=120_000)
    expect(page.locator("#import-progress")).to_have_js_property("value", 1)


def test_a_model_s_default_draft_model_from_its_details(page: Page):
    page.goto("/models/")
    details = page.locator("#model-details")
    select = details.locator("#draft-model")
    row(page, DEFAULT_MODEL).locator("[data-action=details]").click()
    expect(select).to_have_value("")
    expect(select.locator(f"option[value='{DEFAULT_MODEL}']")).to_have_count(0)  # not itself
    try:
        with page.expect_response(lambda r: r.request.method == "PATCH") as patched:
            select.select_option(THINKING_MODEL)  # the same tokenizer: a valid draft
        assert patched.value.ok
        assert page.request.get(f"/api/models/{DEFAULT_MODEL}").json()["draft_model"] == (
            THINKING_MODEL
        )
        page.keyboard.press("Escape")
        row(page, DEFAULT_MODEL).locator("[data-action=details]").click()
        expect(select).to_have_value(THINKING_MODEL)
    finally:
        with page.expect_response(lambda r: r.request.method == "PATCH"):
            select.select_option("")
    assert page.request.get(f"/api/models/{DEFAULT_MODEL}").json()["draft_model"] is None


def test_compare_texts_shows_the_model_s_cosine_and_a_reranker_s_score(
    page: Page, embedding_models, screenshot
):
    import numpy as np

    from tests.embedding_models import BERT, RERANKER

    first, second = "the cat sat on the mat", "a dog sat on the mat"
    vectors = page.request.post(
        "/v1/embeddings", data={"model": BERT, "input": [first, second]},
        headers={"X-CSRFToken": csrf(page)},
    ).json()["data"]  # fmt: skip
    a, b = (np.array(item["embedding"]) for item in vectors)
    expected = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    page.goto("/models/")
    panel = page.locator("#compare-panel")
    expect(panel).to_be_visible()
    page.select_option("#compare-model", BERT)
    page.fill("#compare-first", first)
    page.fill("#compare-second", second)
    page.click("#compare-button")
    expect(panel.locator(".compare-value")).to_have_text(f"{expected:.4f}")
    expect(panel.locator("#compare-result")).to_contain_text("cosine similarity")
    screenshot(page, "models-compare")

    page.fill("#compare-second", first)  # the same text twice: the same vector
    page.click("#compare-button")
    expect(panel.locator(".compare-value")).to_have_text("1.0000")

    score = page.request.post(
        "/v1/rerank", data={"model": RERANKER, "query": first, "documents": [second]},
        headers={"X-CSRFToken": csrf(page)},
    ).json()["results"][0]["relevance_score"]  # fmt: skip
    page.select_option("#compare-model", RERANKER)
    page.fill("#compare-second", second)
    page.click("#compare-button")
    expect(panel.locator(".compare-value")).to_have_text(f"{score:.4f}")
    expect(panel.locator("#compare-result")).to_contain_text("relevance")

    page.fill("#compare-second", "")
    page.click("#compare-button")
    expect(panel.locator("#compare-error")).to_have_text("Write two texts to compare.")


def csrf(page: Page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def test_drain_from_the_page_and_its_worker_events(page: Page, screenshot):
    page.goto("/models/")
    thinking = row(page, THINKING_MODEL)
    events = page.locator("#worker-events")
    if "loaded" in thinking.locator(".loaded").text_content():
        thinking.locator("[data-action=unload]").click()
        expect(thinking.locator(".loaded")).not_to_contain_text("loaded")
    thinking.locator("[data-action=load]").click()
    mine = events.locator(f"li[data-model='{THINKING_MODEL}']")
    expect(mine.filter(has_text="ready").first).to_be_visible(timeout=60_000)
    # The load's answer then the table's refresh: seconds on two busy cores.
    expect(thinking.locator(".loaded")).to_contain_text("loaded", timeout=30_000)
    thinking.locator("[data-action=drain]").click()
    expect(page.locator("#models-status")).to_contain_text(f"Draining {THINKING_MODEL}")
    expect(mine.first).to_have_attribute("data-kind", "exit", timeout=30_000)
    expect(mine.filter(has_text="draining").first).to_be_visible()
    expect(mine.first).to_contain_text("stopped by the lab")
    # The exit refreshed the table: the model is no longer loaded.
    expect(thinking.locator(".loaded")).not_to_contain_text("loaded")
    screenshot(page, "models-events")


def test_mount_and_unmount_an_adapter_from_the_details(
    page: Page, lab_server, tmp_path, screenshot
):
    adapter = write_adapter(tmp_path / "page-alpha", seed=21)
    register_adapter(lab_server, adapter, DEFAULT_MODEL)
    page.goto("/models/")
    row(page, DEFAULT_MODEL).locator("[data-action=details]").click()
    details = page.locator("#model-details")
    mounted = details.locator("#mounted-adapters")
    expect(mounted).to_contain_text("none mounted")
    details.locator("#mount-adapter").select_option("page-alpha")
    details.locator("#mount-button").click()
    expect(mounted.locator("li[data-name='page-alpha']")).to_be_visible()
    expect(details.locator("#adapters-note")).to_contain_text("Mounted page-alpha")
    # The select offers what is not mounted yet; the events panel shows the mount.
    expect(details.locator("#mount-adapter option[value='page-alpha']")).to_have_count(0)
    events = page.locator("#worker-events li[data-kind='adapter_mount']")
    expect(events.filter(has_text="page-alpha").first).to_be_visible()
    assert page.request.get(f"/api/models/{DEFAULT_MODEL}").json()["adapters"] == ["page-alpha"]
    screenshot(page, "models-adapters")
    mounted.locator("button[data-adapter='page-alpha']").click()
    expect(details.locator("#adapters-note")).to_contain_text("Unmounted page-alpha")
    expect(mounted).to_contain_text("none mounted")
    assert page.request.get(f"/api/models/{DEFAULT_MODEL}").json()["adapters"] == []
