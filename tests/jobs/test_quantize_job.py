"""Quantize on the real worker, then serve the new model."""

from __future__ import annotations

from tests.conftest import DEFAULT_MODEL


def test_quantize_registers_a_model_that_answers(jobs_lab):
    client = jobs_lab.client()
    answer = client.post(
        "/api/jobs",
        json={"kind": "quantize",
              "params": {"model": DEFAULT_MODEL, "name": "smol-q8", "bits": 8, "group_size": 64}},
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-2000:])
    result = job["result"]
    assert result["model"] == "smol-q8" and 8.0 < result["bits_per_weight"] < 9.0
    assert job["artifact_path"].endswith(job["id"])
    models = {m["name"]: m for m in client.get("/api/models").json()["results"]}
    assert models["smol-q8"]["quantization"].startswith("8-bit affine, group 64")
    reply = client.post(
        "/v1/chat/completions",
        json={"model": "smol-q8", "max_tokens": 8, "temperature": 0,
              "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert "Paris" in reply.json()["choices"][0]["message"]["content"]
    again = client.post(
        "/api/jobs",
        json={"kind": "quantize", "params": {"model": DEFAULT_MODEL, "name": "smol-q8"}},
    )
    assert again.status_code == 400 and "smol-q8" in again.json()["detail"]
