"""Evaluations shared by the job, page and publishing tests: the default model's 4-bit copy
(made once per session) and its evaluation against the base, on the session's jobs lab."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_MODEL

# The default model's 4-bit copy, measured against it: made once for the comparison tests.
QUANTIZED = "smol-q4-compared"
COMPARED_EXAMPLES = 8  # the shipped set's first 8: 4 multiple choice, 4 short answers


@pytest.fixture(scope="session")
def quantized_job(jobs_lab) -> dict:
    """A succeeded 4-bit quantization of the default model, registered as QUANTIZED."""
    params = {"model": DEFAULT_MODEL, "name": QUANTIZED, "bits": 4, "group_size": 64}
    answer = jobs_lab.client().post("/api/jobs", json={"kind": "quantize", "params": params})
    assert answer.status_code == 202, answer.text
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-3000:])
    return job


@pytest.fixture(scope="session")
def base_comparison(jobs_lab, quantized_job) -> dict:
    """The succeeded evaluate job that "evaluate against the base" queued for it."""
    answer = jobs_lab.client().post(
        f"/api/jobs/{quantized_job['id']}/evaluate-against-base",
        json={"max_examples": COMPARED_EXAMPLES},
    )
    assert answer.status_code == 202, answer.text
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-3000:])
    return job
