"""The comparison page in Chromium: reached from the quantize job's page through "evaluate
against the base", and from the evaluate job's page; the table, the base and the bars."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL
from tests.evaluations import QUANTIZED

METRICS = 6  # perplexity, accuracy, exact match, bits per weight, tokens/s, peak memory


def test_evaluate_against_the_base_from_a_quantize_job(staff_page: Page, jobs_lab, quantized_job):
    page = staff_page
    page.goto(f"/jobs/{quantized_job['id']}/")
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("#compare-link")).to_be_hidden()  # it evaluated nothing itself
    page.click("#evaluate-against-base")
    page.wait_for_url(lambda url: quantized_job["id"] not in url)  # the new job's page
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/$"))
    queued_id = page.url.rstrip("/").rsplit("/", 1)[1]
    client = jobs_lab.client()
    queued = client.get(f"/api/jobs/{queued_id}").json()
    assert queued["kind"] == "evaluate"
    assert [v["model"] for v in queued["params"]["variants"]] == [DEFAULT_MODEL, QUANTIZED]
    client.post(f"/api/jobs/{queued_id}/cancel")  # the whole set is not needed here
    jobs_lab.wait_job(queued_id)


def test_the_comparison_page(staff_page: Page, base_comparison, screenshot):
    page = staff_page
    page.goto(f"/jobs/{base_comparison['id']}/")
    link = page.locator("#compare-link")
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(re.compile(r"/compare/$"))
    rows = page.locator("#compare-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("th")).to_contain_text(DEFAULT_MODEL)
    expect(rows.nth(0).locator(".base-badge")).to_have_text("base")
    expect(rows.nth(1).locator(".base-badge")).to_have_count(0)
    expect(page.locator("#compare-table thead th[data-metric]")).to_have_count(METRICS)
    expect(rows.nth(0).locator(".difference")).to_have_count(0)
    expect(rows.nth(1).locator(".difference")).to_have_count(METRICS)
    base, quantized = base_comparison["result"]["variants"]
    perplexity = rows.nth(1).locator("td").nth(0)
    expect(perplexity.locator(".value")).to_have_text(f"{quantized['perplexity']:.3f}")
    change = quantized["perplexity"] - base["perplexity"]
    expect(perplexity.locator(".difference")).to_contain_text(f"{change:+.3f}")
    bits = page.locator('.compare-plot[data-metric="bits_per_weight"] rect')
    expect(bits).to_have_count(2)
    base_width, quantized_width = (float(bits.nth(i).get_attribute("width")[:-1]) for i in (0, 1))
    assert quantized_width < base_width  # fewer bits, a shorter bar
    expect(page.locator(".compare-plot")).to_have_count(METRICS)
    screenshot(page, "comparison")


def test_a_job_without_an_evaluation_has_no_comparison_page(staff_page: Page, quantized_job):
    answer = staff_page.goto(f"/jobs/{quantized_job['id']}/compare/")
    assert answer.status == 404


def test_the_quantize_form_asks_for_an_evaluation(staff_page: Page, jobs_lab):
    page = staff_page
    page.goto("/jobs/")
    page.select_option("#new-job-kind", "quantize")
    expect(page.locator(f'#quantize-model option[value="{DEFAULT_MODEL}"]')).to_be_attached()
    page.select_option("#quantize-model", DEFAULT_MODEL)
    page.fill("#quantize-name", "smol-q4-form")
    page.check("#quantize-evaluate")
    page.click("#submit-job")
    expect(page).to_have_url(re.compile(r"/jobs/[0-9a-f-]{36}/$"))
    job_id = page.url.rstrip("/").rsplit("/", 1)[1]
    client = jobs_lab.client()
    job = client.get(f"/api/jobs/{job_id}").json()
    client.post(f"/api/jobs/{job_id}/cancel")  # the conversion is not what is tested here
    assert job["kind"] == "quantize" and job["params"]["evaluate"] == {"max_examples": None}
    jobs_lab.wait_job(job_id)
