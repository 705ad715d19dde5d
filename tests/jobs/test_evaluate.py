"""Evaluate on the real worker: the default model on the shipped set, identical variants
with identical figures, an adapter against its base, bad input as 400s, cancel."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest

from tests.conftest import DEFAULT_MODEL
from tests.jobs.test_jobs_api import jsonl, upload

TINY = "tiny-eval"
ADAPTER = "tiny-eval-lora"
SHORT = 8  # examples per variant: the first 8 of the shipped set, 4 of each kind


def evaluate(jobs_lab, **params) -> dict:
    answer = jobs_lab.client().post("/api/jobs", json={"kind": "evaluate", "params": params})
    assert answer.status_code == 202, answer.text
    return answer.json()


def finished(jobs_lab, job: dict) -> dict:
    job = jobs_lab.wait_job(job["id"], timeout=300)
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-3000:])
    return job


def seconds(job: dict) -> float:
    started, ended = (datetime.fromisoformat(job[key]) for key in ("started_at", "finished_at"))
    return (ended - started).total_seconds()


def refused(jobs_lab, params: dict) -> str:
    answer = jobs_lab.client().post("/api/jobs", json={"kind": "evaluate", "params": params})
    assert answer.status_code == 400, answer.text
    return answer.json()["detail"]


@pytest.fixture(scope="module")
def tiny_adapter(jobs_lab, tiny_model_folder, tiny_dataset_folder) -> str:
    """A LoRA adapter of the tiny llama, from a short finetune on the worker."""
    jobs_lab.add_model(tiny_model_folder, TINY)
    answer = jobs_lab.client().post(
        "/api/jobs",
        json={"kind": "finetune",
              "params": {"model": TINY, "dataset": {"path": str(tiny_dataset_folder)},
                         "batch_size": 4, "learning_rate": 1e-3, "num_layers": 2, "iters": 5,
                         "adapter_name": ADAPTER}},
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    assert finished(jobs_lab, answer.json())["result"]["adapter"] == ADAPTER
    return ADAPTER


@pytest.fixture(scope="module")
def single_run(jobs_lab) -> dict:
    job = evaluate(jobs_lab, variants=[DEFAULT_MODEL], dataset="builtin", max_examples=SHORT)
    return finished(jobs_lab, job)


def test_the_default_model_on_the_shipped_set(single_run):
    [figures] = single_run["result"]["variants"]
    assert figures["name"] == DEFAULT_MODEL and figures["adapter"] is None
    assert math.isfinite(figures["perplexity"]) and figures["perplexity"] > 1
    assert 0 <= figures["accuracy"] <= 1
    # It answers "Paris" to the shipped set's first short question, at least.
    assert 0 < figures["exact_match"] <= 1
    assert figures["examples"] == SHORT and figures["tokens"] >= SHORT
    assert figures["tokens_per_second"] > 0
    assert figures["peak_memory_bytes"] > 50 << 20  # the weights alone are more than that
    assert single_run["result"]["dataset"]["multiple_choice"] == 4
    assert single_run["result"]["dataset"]["exact_answer"] == 4
    assert single_run["progress"] == 1.0 and single_run["artifact_path"]
    assert seconds(single_run) < 60, seconds(single_run)


def test_identical_variants_have_identical_figures(jobs_lab, single_run):
    job = evaluate(
        jobs_lab, variants=[DEFAULT_MODEL, {"model": DEFAULT_MODEL, "adapter": "none"}],
        dataset="builtin", max_examples=SHORT,
    )  # fmt: skip
    first, second = finished(jobs_lab, job)["result"]["variants"]
    [alone] = single_run["result"]["variants"]
    for key in ("perplexity", "loss", "accuracy", "exact_match", "examples", "tokens"):
        assert first[key] == second[key] == alone[key], key


def test_an_adapter_against_its_base(jobs_lab, tiny_adapter):
    job = evaluate(
        jobs_lab, variants=[TINY, {"model": TINY, "adapter": tiny_adapter}], dataset="builtin",
        max_examples=SHORT,
    )  # fmt: skip
    base, tuned = finished(jobs_lab, job)["result"]["variants"]
    assert tuned["adapter"] == tiny_adapter and base["adapter"] is None
    assert base["tokens"] == tuned["tokens"]  # the same tokens...
    assert base["perplexity"] != tuned["perplexity"]  # ...scored by different weights


def test_bad_variants_are_400s(jobs_lab, tiny_adapter):
    assert "model 'nope' is not in the registry" in refused(
        jobs_lab, {"variants": ["nope"], "dataset": "builtin"}
    )
    assert "variants must be a list of 1 to 4 variants" in refused(
        jobs_lab, {"variants": [DEFAULT_MODEL] * 5, "dataset": "builtin"}
    )
    detail = refused(
        jobs_lab, {"variants": [{"model": DEFAULT_MODEL, "adapter": tiny_adapter}],
                   "dataset": "builtin"},
    )  # fmt: skip
    assert f"'{tiny_adapter}' was trained on {TINY}, not {DEFAULT_MODEL}" in detail


def test_bad_lines_are_400s_with_their_numbers(jobs_lab):
    client = jobs_lab.client()
    good = {"prompt": "What is 2 + 2?", "choices": ["3", "4"], "answer": 1}
    text = jsonl([good, good]) + "{oops\n" + json.dumps({**good, "answer": 2}) + "\n"
    upload_id = upload(client, "eval.jsonl", text)
    detail = refused(jobs_lab, {"variants": [DEFAULT_MODEL], "dataset": {"upload": upload_id}})
    assert "line 3: not valid JSON" in detail
    assert "line 4: answer must be between 0 and 1 (got 2)" in detail
    queued = client.get("/api/jobs", params={"kind": "evaluate", "status": "queued"})
    assert queued.json()["results"] == []


def test_cancel_stops_a_running_evaluation(jobs_lab):
    client = jobs_lab.client()
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(400)]
    upload_id = upload(client, "long.jsonl", jsonl(rows))
    job = evaluate(jobs_lab, variants=[DEFAULT_MODEL], dataset={"upload": upload_id})
    jobs_lab.wait_running(job["id"], min_progress=0.0)  # past its first example
    answer = client.post(f"/api/jobs/{job['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["cancel_requested"]
    ended = jobs_lab.wait_job(job["id"], timeout=60)
    assert ended["status"] == "cancelled" and ended["message"] == "cancelled on request"
    assert ended["progress"] < 0.5 and ended["result"] == {}
    folder = jobs_lab.home / "artifacts"
    leftovers = [p.name for p in folder.iterdir() if job["id"] in p.name] if folder.exists() else []
    assert leftovers == []
