"""/api/jobs against a live lab with a real Celery worker: datasets, bad input, cancel."""

from __future__ import annotations

import json

import pytest

CHAT_LINES = [
    {"messages": [{"role": "user", "content": f"Question {i}?"},
                  {"role": "assistant", "content": "The answer is blue."}]}
    for i in range(20)
]  # fmt: skip


def upload(client, name: str, text: str) -> str:
    answer = client.post("/api/datasets/uploads", files={"file": (name, text.encode())})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def test_a_dataset_job_runs_on_the_worker(jobs_lab):
    client = jobs_lab.client()
    upload_id = upload(client, "chat.jsonl", jsonl(CHAT_LINES))
    answer = client.post(
        "/api/jobs",
        json={"kind": "dataset", "params": {"format": "chat", "source": {"upload": upload_id},
                                            "split": {"train": 0.8, "valid": 0.2, "test": 0}}},
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    created = answer.json()
    assert (
        created["status"] == "queued" and answer.headers["Location"] == f"/api/jobs/{created['id']}"
    )
    job = jobs_lab.wait_job(created["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["counts"] == {"train": 16, "valid": 4, "test": 0}
    assert job["result"]["tokens"]["train"] > 16 * 5
    assert job["progress"] == 1.0 and job["started_at"] and job["finished_at"]
    preview = client.get(f"/api/jobs/{created['id']}/preview", params={"split": "valid"}).json()
    assert preview["total"] == 4 and len(preview["examples"]) == 4
    assert preview["examples"][0]["messages"][1]["content"] == "The answer is blue."
    listed = client.get("/api/jobs", params={"kind": "dataset"}).json()["results"]
    assert created["id"] in [j["id"] for j in listed]


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"kind": "bake", "params": {}}, "kind must be one of pull, quantize, finetune, dataset"),
        ({"kind": "quantize", "params": []}, "params must be an object"),
        ({"kind": "quantize", "params": {"model": "nope", "name": "x"}}, "nope"),
        (
            {
                "kind": "quantize",
                "params": {"model": "smollm2-135m-instruct", "name": "q", "bits": 7},
            },
            "bits",
        ),
        ({"kind": "finetune", "params": {"model": "smollm2-135m-instruct"}}, "dataset"),
        (
            {"kind": "dataset", "params": {"format": "chat", "source": {"upload": "0" * 32}}},
            "not found",
        ),
        ({"kind": "dataset", "extra": 1}, "unknown field 'extra'"),
    ],
)
def test_bad_parameters_are_400s_with_their_reason(jobs_lab, body, reason):
    answer = jobs_lab.client().post("/api/jobs", json=body)
    assert answer.status_code == 400, answer.text
    assert reason in answer.json()["detail"]


def test_bad_dataset_lines_are_400s_with_line_numbers(jobs_lab):
    client = jobs_lab.client()
    rows = (
        jsonl(CHAT_LINES[:3])
        + "not json\n"
        + json.dumps({"messages": [{"role": "wizard", "content": "x"}]})
        + "\n"
    )
    upload_id = upload(client, "bad.jsonl", rows)
    answer = client.post(
        "/api/jobs",
        json={"kind": "dataset", "params": {"format": "chat", "source": {"upload": upload_id}}},
    )
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "line 4" in detail and "line 5" in detail, detail
    assert (
        client.get("/api/jobs", params={"kind": "dataset", "status": "queued"}).json()["results"]
        == []
    )


def test_only_staff_and_no_anonymous(jobs_lab):
    import httpx

    anonymous = httpx.get(f"{jobs_lab.url}/api/jobs")
    assert anonymous.status_code == 401
    assert (
        jobs_lab.client().post("/api/jobs/00000000-0000-0000-0000-000000000000/cancel").status_code
        == 404
    )
