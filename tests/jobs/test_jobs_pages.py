"""The jobs pages in Chromium against the live lab and its worker: forms and live progress."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from tests.jobs.conftest import TRAIN_QUESTIONS
from tests.jobs.test_finetune_job import TINY, finetune


def test_a_dataset_from_an_uploaded_file(staff_page: Page, tmp_path, screenshot):
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Q{i}?"},
                {"role": "assistant", "content": "A."},
            ]
        }
        for i in range(10)
    ]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    page = staff_page
    page.goto("/jobs/")
    page.select_option("#new-job-kind", "dataset")
    page.select_option("#dataset-format", "chat")
    page.set_input_files("#dataset-file", str(data))
    page.fill("#dataset-split-train", "0.6")
    page.fill("#dataset-split-valid", "0.2")
    page.fill("#dataset-split-test", "0.2")
    page.click("#submit-job")
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/$"))
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=120_000)
    expect(page.locator("#dataset-preview")).to_contain_text("Q", timeout=30_000)
    expect(page.locator("#use-artifact")).to_be_visible()


def test_a_finetune_streams_progress_and_its_adapter_is_used_in_chat(
    staff_page: Page, jobs_lab, tiny_model_folder, tiny_dataset_folder, screenshot
):
    if TINY not in [m["name"] for m in jobs_lab.client().get("/api/models").json()["results"]]:
        jobs_lab.add_model(tiny_model_folder, TINY)
    page = staff_page
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    job = finetune(
        jobs_lab, tiny_dataset_folder, iters=40, steps_per_eval=10, steps_per_report=2,
        adapter_name="tiny-page",
    )  # fmt: skip
    page.goto(f"/jobs/{job['id']}/")
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=180_000)
    updates = [json.loads(f)["job"] for f in frames if '"type": "job"' in f or '"type":"job"' in f]
    progress = sorted({u["progress"] for u in updates})
    assert len(progress) >= 3, progress  # the page heard the run move, not only its end
    train_line = page.locator("#loss-plot path.train")
    expect(train_line).to_have_attribute("d", re.compile(r"M.+L"))
    expect(page.locator("#loss-plot path.valid")).to_have_attribute("d", re.compile(r"M.+L"))
    expect(page.locator("#job-log")).to_contain_text("finished")
    screenshot(page, "job")

    page.click("#use-artifact")
    expect(page).to_have_url(re.compile(r"/\?model=tiny&adapter=tiny-page"))
    expect(page.locator("#adapter-picker")).to_have_value("tiny-page")
    page.fill("#param-max_tokens", "4")
    page.fill("#composer", TRAIN_QUESTIONS[0])
    page.click("#send-button")
    # The first reply also loads the tiny model on the server: give it time.
    reply = page.locator(".message[data-role=assistant]").last
    expect(reply).to_have_attribute("data-id", re.compile(r"\d+"), timeout=120_000)
    expect(page.locator("#chat-error")).to_be_hidden()
    expect(reply.locator(".stats")).to_contain_text("tokens")
