"""The token form and the Publish form in Chromium, against the lab, its worker and the stand-in."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

TOKEN = "hf_standin_token"


def finished_dataset_job(jobs_lab) -> str:
    client = jobs_lab.client()
    rows = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(6))
    upload = client.post("/api/datasets/uploads", files={"file": ("t.jsonl", rows.encode())})
    job = client.post(
        "/api/jobs",
        json={"kind": "dataset", "params": {"format": "text", "source": {"upload": upload.json()["id"]},
                                            "split": {"train": 0.5, "valid": 0.5}}},
    ).json()  # fmt: skip
    assert jobs_lab.wait_job(job["id"])["status"] == "succeeded"
    return job["id"]


def test_save_the_token_then_publish_a_dataset(staff_page: Page, jobs_lab, hub, screenshot):
    page = staff_page
    page.goto("/settings/")
    page.fill("#hf-token-input", TOKEN)
    page.click("#hf-token-save")
    expect(page.locator("#hf-token-status")).to_contain_text("tester")
    expect(page.locator("#hf-token-input")).to_have_value("")
    assert TOKEN not in page.content()

    job_id = finished_dataset_job(jobs_lab)
    page.goto(f"/jobs/{job_id}/")
    expect(page.locator("#publish-card")).to_be_visible()
    page.fill("#publish-repo", "tester/from-the-page")
    page.check("#publish-private")
    page.click("#publish-button")
    expect(page.locator("#publish-status")).to_be_visible()
    page.locator("#publish-status a", has_text="follow the upload").click()
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/$"))
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=120_000)
    expect(page.locator("#publish-url")).to_have_attribute(
        "href", f"{hub.url}/datasets/tester/from-the-page"
    )
    expect(page.locator("#publish-progress-text")).to_contain_text("3 of 3 files")
    screenshot(page, "publish")
    repo = hub.repos[("dataset", "tester/from-the-page")]
    assert repo["private"] is True and set(repo["files"]) == {
        "README.md",
        "train.jsonl",
        "valid.jsonl",
    }
