"""Evaluate against the base on the real worker: a 4-bit copy of the default model beside
it, the figures the comparison page shows, and what the action refuses."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_MODEL
from tests.evaluations import COMPARED_EXAMPLES, QUANTIZED


def test_the_result_is_measured_beside_its_source(base_comparison):
    assert base_comparison["kind"] == "evaluate"
    assert base_comparison["params"]["dataset"] == "builtin"
    base, quantized = base_comparison["result"]["variants"]
    assert (base["name"], quantized["name"]) == (DEFAULT_MODEL, QUANTIZED)
    assert base["examples"] == quantized["examples"] == COMPARED_EXAMPLES
    assert base["tokens"] == quantized["tokens"]  # the same tokens, scored by both
    # The default model is itself quantized (from its GGUF file), at about 5.8 bits.
    assert 4.0 < quantized["bits_per_weight"] < 5.0 < base["bits_per_weight"]
    # 4-bit weights lose something: never a lower perplexity beyond noise.
    assert quantized["perplexity"] > base["perplexity"] * 0.98, (base, quantized)
    print(f"\nbase {base}\n4-bit {quantized}")


def post(jobs_lab, job_id, body=None):
    return jobs_lab.client().post(f"/api/jobs/{job_id}/evaluate-against-base", json=body or {})


def test_what_cannot_be_evaluated_against_a_base_is_a_400(jobs_lab, base_comparison):
    answer = post(jobs_lab, base_comparison["id"])
    assert answer.status_code == 400
    assert (
        answer.json()["detail"] == "only a quantize or finetune job can be evaluated, not evaluate"
    )
    missing = post(jobs_lab, "00000000-0000-4000-8000-000000000000")
    assert missing.status_code == 404


@pytest.mark.parametrize(
    "body, detail",
    [
        ({"dataset": "builtin"}, 'expected {} or {"max_examples": N}'),
        ({"max_examples": 0}, "max_examples must be between 1 and 10000"),
        ({"max_examples": "8"}, "max_examples must be an integer"),
    ],
)
def test_bad_bodies_are_400s(jobs_lab, quantized_job, body, detail):
    answer = post(jobs_lab, quantized_job["id"], body)
    assert answer.status_code == 400 and answer.json()["detail"] == detail


def test_an_unfinished_job_is_a_400(jobs_lab):
    client = jobs_lab.client()
    params = {"model": DEFAULT_MODEL, "name": "smol-q4-unfinished", "bits": 4}
    job = client.post("/api/jobs", json={"kind": "quantize", "params": params}).json()
    try:
        answer = post(jobs_lab, job["id"])
        assert answer.status_code == 400
        assert answer.json()["detail"].startswith("the job has not succeeded (it is ")
    finally:
        client.post(f"/api/jobs/{job['id']}/cancel")
        jobs_lab.wait_job(job["id"])


def test_the_default_model_and_its_8_and_4_bit_copies_on_the_whole_shipped_set(
    jobs_lab, quantized_job
):
    client = jobs_lab.client()
    params = {"model": DEFAULT_MODEL, "name": "smol-q8-compared", "bits": 8}
    eight = client.post("/api/jobs", json={"kind": "quantize", "params": params}).json()
    assert jobs_lab.wait_job(eight["id"])["status"] == "succeeded"
    variants = [DEFAULT_MODEL, "smol-q8-compared", QUANTIZED]
    body = {"kind": "evaluate", "params": {"variants": variants, "dataset": "builtin"}}
    job = jobs_lab.wait_job(client.post("/api/jobs", json=body).json()["id"], timeout=900)
    assert job["status"] == "succeeded", job["error"]
    base, eight_bit, four_bit = job["result"]["variants"]
    for figures in (base, eight_bit, four_bit):
        assert figures["examples"] == 46 and figures["perplexity"] > 1
        assert 0 <= figures["accuracy"] <= 1 and 0 <= figures["exact_match"] <= 1
    # 8 bits keep the base's figures within noise; 4 bits never score a lower perplexity.
    assert abs(eight_bit["perplexity"] / base["perplexity"] - 1) < 0.05
    assert four_bit["perplexity"] > base["perplexity"] * 0.98
    for figures in (base, eight_bit, four_bit):
        print(f"\n{figures['name']}: " + ", ".join(
            f"{key} {figures[key]:.4g}" for key in
            ("perplexity", "accuracy", "exact_match", "bits_per_weight", "tokens_per_second")
        ))  # fmt: skip
