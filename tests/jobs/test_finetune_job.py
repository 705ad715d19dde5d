"""Finetune on the real worker: an adapter that serves at once, cancel, a killed worker."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.jobs.conftest import SYSTEM_PROMPT, TRAIN_QUESTIONS

TINY = "tiny"


@pytest.fixture(scope="module")
def tiny(jobs_lab, tiny_model_folder) -> str:
    jobs_lab.add_model(tiny_model_folder, TINY)
    return TINY


def finetune(jobs_lab, dataset_folder, **params) -> dict:
    body = {"kind": "finetune",
            "params": {"model": TINY, "dataset": {"path": str(dataset_folder)}, "batch_size": 4,
                       "learning_rate": 1e-3, "num_layers": 2, **params}}  # fmt: skip
    answer = jobs_lab.client().post("/api/jobs", json=body)
    assert answer.status_code == 202, answer.text
    return answer.json()


def reply(client, adapter: str) -> dict:
    answer = client.post(
        "/v1/chat/completions",
        json={"model": TINY, "adapter": adapter, "max_tokens": 6, "temperature": 0,
              "logprobs": True,
              "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": TRAIN_QUESTIONS[0]}]},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]


def test_lora_adapter_is_registered_and_changes_the_output(jobs_lab, tiny, tiny_dataset_folder):
    job = finetune(
        jobs_lab, tiny_dataset_folder, iters=30, steps_per_eval=10, steps_per_report=5,
        adapter_name="tiny-secret",
    )  # fmt: skip
    job = jobs_lab.wait_job(job["id"])
    assert job["status"] == "succeeded", (job["error"], jobs_lab.worker.log()[-3000:])
    train, valid = job["metrics"]["train_loss"], job["metrics"]["val_loss"]
    assert len(train) >= 6 and len(valid) >= 3
    assert train[-1][1] < train[0][1] and valid[-1][1] < valid[0][1]
    assert job["result"]["adapter"] == "tiny-secret"
    client = jobs_lab.client()
    adapters = client.get("/api/adapters", params={"model": TINY}).json()["results"]
    assert [a["name"] for a in adapters] == ["tiny-secret"]

    base, tuned = reply(client, "none"), reply(client, "tiny-secret")
    assert tuned["message"]["content"] != base["message"]["content"]
    # The adapter's first token is far likelier under the adapter than under the base.
    assert tuned["logprobs"]["content"][0]["logprob"] > base["logprobs"]["content"][0]["logprob"]
    wrong = client.post(
        "/v1/chat/completions",
        json={"adapter": "tiny-secret", "max_tokens": 2,
              "messages": [{"role": "user", "content": "hi"}]},
    )  # fmt: skip
    assert wrong.status_code == 400 and "trained on tiny" in wrong.json()["error"]["message"]
    missing = client.post(
        "/v1/completions", json={"model": TINY, "adapter": "nope", "prompt": "hi", "max_tokens": 2}
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "adapter_not_found"


def artifacts(jobs_lab, job_id: str) -> list:
    folder = jobs_lab.home / "artifacts"
    return [p.name for p in folder.iterdir() if job_id in p.name] if folder.exists() else []


def test_cancel_stops_a_running_finetune_and_cleans_up(jobs_lab, tiny, tiny_dataset_folder):
    job = finetune(jobs_lab, tiny_dataset_folder, iters=100000, steps_per_report=1,
                   adapter_name="never-made")  # fmt: skip
    jobs_lab.wait_running(job["id"], min_progress=0.0)
    answer = jobs_lab.client().post(f"/api/jobs/{job['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["cancel_requested"]
    ended = jobs_lab.wait_job(job["id"], timeout=120)
    assert ended["status"] == "cancelled" and ended["message"] == "cancelled on request"
    assert artifacts(jobs_lab, job["id"]) == []
    names = [a["name"] for a in jobs_lab.client().get("/api/adapters").json()["results"]]
    assert "never-made" not in names
    again = jobs_lab.client().post(f"/api/jobs/{job['id']}/cancel")
    assert again.status_code == 409


def test_a_killed_worker_fails_its_job_before_it_is_back(jobs_lab, tiny, tiny_dataset_folder):
    """The whole worker killed (its watchdog with it): the web process's watchdog fails
    the job while no worker runs at all."""
    job = finetune(jobs_lab, tiny_dataset_folder, iters=100000, steps_per_report=1,
                   adapter_name="killed-run")  # fmt: skip
    jobs_lab.wait_running(job["id"], min_progress=0.0)
    jobs_lab.worker.kill()
    assert jobs_lab.client().get(f"/api/jobs/{job['id']}").json()["status"] == "running"
    try:
        ended = jobs_lab.wait_job(job["id"], timeout=60)  # stale after 15 s here
    finally:
        jobs_lab.worker.start()
    assert ended["status"] == "failed" and "no heartbeat" in ended["error"], ended
    assert artifacts(jobs_lab, job["id"]) == []
    names = [a["name"] for a in jobs_lab.client().get("/api/adapters").json()["results"]]
    assert "killed-run" not in names
    # The restarted worker takes new work.
    quick = finetune(jobs_lab, tiny_dataset_folder, iters=2, adapter_name="after-restart")
    assert jobs_lab.wait_job(quick["id"])["status"] == "succeeded"


def test_a_killed_job_process_fails_its_job_without_a_restart(jobs_lab, tiny, tiny_dataset_folder):
    """The OOM killer or the hard time limit ends the pool child, not the worker: the
    worker's watchdog sees the heartbeat stop and fails the job with the reason."""
    job = finetune(jobs_lab, tiny_dataset_folder, iters=100000, steps_per_report=1,
                   adapter_name="oom-run")  # fmt: skip
    jobs_lab.wait_running(job["id"], min_progress=0.0)
    children = subprocess.run(
        ["pgrep", "-P", str(jobs_lab.worker.process.pid)], capture_output=True, text=True
    ).stdout.split()
    assert children, "the worker has no pool child"
    for child in children:
        os.kill(int(child), signal.SIGKILL)
    ended = jobs_lab.wait_job(job["id"], timeout=60)  # heartbeat 1 s, stale after 15 s here
    assert ended["status"] == "failed" and "no heartbeat" in ended["error"], ended
    assert artifacts(jobs_lab, job["id"]) == []
    assert jobs_lab.worker.process.poll() is None  # the worker itself lived on
    quick = finetune(jobs_lab, tiny_dataset_folder, iters=2, adapter_name="after-oom")
    assert jobs_lab.wait_job(quick["id"])["status"] == "succeeded"
