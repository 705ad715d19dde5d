"""Evaluation figures in the pushed card, on the real worker and the Hub stand-in: a
quantize job that evaluated its result itself, and one evaluated afterwards from its page."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import ModelCard
from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL
from tests.evaluations import COMPARED_EXAMPLES

TOKEN = "hf_standin_token"  # the stand-in knows it, as user "tester"
EVALUATED = "smol-q4-evaluated"


@pytest.fixture(scope="module")
def api(jobs_lab, hub):
    client = jobs_lab.client()
    saved = client.post("/api/settings/hf-token", json={"token": TOKEN})
    assert saved.status_code == 200, saved.text
    return client


@pytest.fixture(scope="module")
def evaluated_quantize_job(jobs_lab) -> dict:
    """A 4-bit quantization that measured its result against its source in the same job."""
    params = {"model": DEFAULT_MODEL, "name": EVALUATED, "bits": 4,
              "evaluate": {"max_examples": COMPARED_EXAMPLES}}  # fmt: skip
    answer = jobs_lab.client().post("/api/jobs", json={"kind": "quantize", "params": params})
    assert answer.status_code == 202, answer.text
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-3000:])
    return job


def test_a_quantize_job_reports_its_perplexity_change(evaluated_quantize_job):
    result = evaluated_quantize_job["result"]
    base, made = result["evaluation"]["variants"]
    assert (base["name"], made["name"]) == (DEFAULT_MODEL, EVALUATED)
    assert base["examples"] == made["examples"] == COMPARED_EXAMPLES
    change = result["perplexity"]
    assert change["source"] == round(base["perplexity"], 4)
    assert change["result"] == round(made["perplexity"], 4)
    assert change["change"] == pytest.approx(made["perplexity"] - base["perplexity"], abs=1e-3)
    assert change["change"] > -0.02 * base["perplexity"]  # 4 bits never help beyond noise
    assert made["bits_per_weight"] == result["bits_per_weight"]
    assert "perplexity" in evaluated_quantize_job["log_tail"]


def card_of(hub, repo_id: str) -> ModelCard:
    return ModelCard(hub.repos[("model", repo_id)]["files"]["README.md"].decode())


def metrics_of(card: ModelCard) -> dict:
    return {result.metric_type: result.metric_value for result in card.data.eval_results}


def test_the_pushed_card_carries_the_jobs_own_evaluation(api, hub, evaluated_quantize_job):
    repo_id = "tester/smol-q4-evaluated"
    body = {"repo_id": repo_id, "job_id": evaluated_quantize_job["id"]}
    answer = api.post("/api/quantize/push", json=body)
    assert answer.status_code == 200, answer.text
    card = card_of(hub, repo_id)
    figures = evaluated_quantize_job["result"]["evaluation"]["variants"][1]
    assert card.data.model_name == "smol-q4-evaluated"
    assert metrics_of(card) == {
        "perplexity": round(figures["perplexity"], 4),
        "accuracy": round(figures["accuracy"], 4),
        "exact_match": round(figures["exact_match"], 4),
    }
    [result] = {(r.task_type, r.dataset_type) for r in card.data.eval_results}
    assert result == ("text-generation", "mlx-lab/basic-eval")
    assert "model-index:" in card.content and "## Evaluation" in card.text
    assert f"| `{DEFAULT_MODEL}` (base) | " in card.text
    assert f"**this model** (`{EVALUATED}`)" in card.text
    assert f"{figures['perplexity']:.3f}" in card.text
    assert "Perplexity, base → this model" in card.text


def test_a_later_evaluation_against_the_base_reaches_the_card(api, hub, jobs_lab, quantized_job):
    # Its own evaluation, queued now: the newest of the session's that measured this model
    # (other tests evaluate the shared 4-bit copy too), so the one the card must carry.
    answer = api.post(
        f"/api/jobs/{quantized_job['id']}/evaluate-against-base", json={"max_examples": 3}
    )
    assert answer.status_code == 202, answer.text
    later = jobs_lab.wait_job(answer.json()["id"])
    assert later["status"] == "succeeded", later["error"]
    made = later["result"]["variants"][1]
    answer = api.post("/api/quantize/push", json={"repo_id": "tester/smol-q4-compared",
                                                  "job_id": quantized_job["id"]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    card = card_of(hub, "tester/smol-q4-compared")
    assert metrics_of(card)["perplexity"] == round(made["perplexity"], 4)


def test_the_comparison_page_of_a_quantize_job(staff_page: Page, evaluated_quantize_job):
    page = staff_page
    page.goto(f"/jobs/{evaluated_quantize_job['id']}/")
    expect(page.locator("#job-result")).to_contain_text("Perplexity")
    page.click("#compare-link")
    expect(page).to_have_url(re.compile(r"/compare/$"))
    rows = page.locator("#compare-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(1).locator("th")).to_contain_text(EVALUATED)
