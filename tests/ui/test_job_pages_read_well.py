"""The jobs pages read as text for people: no null or undefined, results as tables, and
the New job form offers evaluate (which the API takes)."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL, THINKING_MODEL
from tests.ui.lab_pages import evaluate_job

NOT_TEXT = re.compile(r"\b(null|undefined|NaN)\b")


def no_null(page: Page) -> None:
    text = page.locator("body").inner_text()
    assert not NOT_TEXT.search(text), NOT_TEXT.search(text).group(0)


def test_jobs_pages_show_no_null_render_results_and_offer_evaluate(page: Page, lab_server):
    job_id = evaluate_job(lab_server)
    page.goto(f"/jobs/{job_id}/")
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("#job-title")).to_have_text(
        f"Evaluate {job_id[:8]}{DEFAULT_MODEL} vs {THINKING_MODEL}"  # no "null" after the id
    )
    variants = page.locator("#job-result table")
    expect(variants.locator("tbody tr")).to_have_count(2)
    expect(variants.locator("thead")).to_contain_text("Perplexity")
    expect(variants.locator("tbody tr").first).to_contain_text("6.96")
    expect(page.locator("#job-params table tbody tr")).to_have_count(2)  # the variants asked
    no_null(page)

    page.goto("/jobs/")
    expect(page.locator(f"#jobs-table tr[data-id='{job_id}']")).to_contain_text("evaluate")
    no_null(page)
    page.select_option("#new-job-kind", "evaluate")
    expect(page.locator("#evaluate-form")).to_be_visible()
    page.click("#submit-job")
    expect(page.locator("#job-error")).to_have_text("Choose a model for the base.")
    page.locator(".evaluate-model").first.select_option(DEFAULT_MODEL)
    page.fill("#evaluate-max_examples", "2")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/api/jobs")) as sent:
        page.click("#submit-job")
    assert json.loads(sent.value.post_data) == {
        "kind": "evaluate",
        "params": {"max_examples": 2, "variants": [{"model": DEFAULT_MODEL}], "dataset": "builtin"},
    }
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/$"))  # the API took it
    expect(page.locator("#job-title")).to_contain_text("Evaluate")
    expect(page.locator("#job-status")).to_have_text("queued")  # no worker on this server
    page.click("#cancel-job")
    expect(page.locator("#job-status")).to_have_text("cancelled")
    no_null(page)
