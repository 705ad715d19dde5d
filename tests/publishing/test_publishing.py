"""Publishing to the Hub through the real huggingface_hub client, against the stand-in."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.conftest import DEFAULT_MODEL
from tests.databases import query_one

TOKEN = "hf_standin_token"  # the stand-in knows it, as user "tester"
seen_bodies: list[str] = []  # every answer, to check the token never comes back


def call(client, method: str, path: str, **kwargs):
    answer = client.request(method, path, **kwargs)
    seen_bodies.append(answer.text)
    return answer


@pytest.fixture(scope="module")
def api(jobs_lab):
    client = jobs_lab.client()
    call(client, "DELETE", "/api/settings/hf-token")
    return client


@pytest.fixture(scope="module")
def dataset_job(jobs_lab, api) -> dict:
    rows = [{"prompt": f"Q{i}", "completion": f"A{i}"} for i in range(10)]
    upload = api.post(
        "/api/datasets/uploads",
        files={"file": ("qa.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())},
    ).json()["id"]
    job = api.post(
        "/api/jobs",
        json={"kind": "dataset", "params": {"format": "completions", "source": {"upload": upload},
                                            "split": {"train": 0.8, "valid": 0.2}}},
    ).json()  # fmt: skip
    return jobs_lab.wait_job(job["id"])


@pytest.fixture(scope="module")
def quantize_job(jobs_lab, api) -> dict:
    job = api.post(
        "/api/jobs",
        json={"kind": "quantize",
              "params": {"model": DEFAULT_MODEL, "name": "smol-q4-pub", "bits": 4, "group_size": 64}},
    ).json()  # fmt: skip
    return jobs_lab.wait_job(job["id"])


def test_token_settings(api, hub):
    assert call(api, "GET", "/api/settings/hf-token").json() == {"ok": True, "hasToken": False}
    for body, error in [
        ([1], "expected a JSON object"),
        ({"token": "  "}, "token required"),
        # It goes into an Authorization header: the fuzzer once saved one that broke searches.
        (
            {"token": "hf_\u00e9t\u00e9"},
            "token must be printable ASCII, as Hugging Face tokens are",
        ),
    ]:
        answer = call(api, "POST", "/api/settings/hf-token", json=body)
        assert answer.status_code == 400 and answer.json() == {"ok": False, "error": error}
    rejected = call(api, "POST", "/api/settings/hf-token", json={"token": "hf_wrong"})
    assert rejected.status_code == 400 and "rejected" in rejected.json()["error"]
    assert call(api, "GET", "/api/settings/hf-token").json()["hasToken"] is False
    saved = call(api, "POST", "/api/settings/hf-token", json={"token": TOKEN})
    assert saved.json() == {"ok": True, "hasToken": True, "verified": True, "username": "tester"}
    assert call(api, "GET", "/api/settings/hf-token").json() == {"ok": True, "hasToken": True}


def test_the_token_is_encrypted_at_rest(jobs_lab):
    (ciphertext,) = query_one(jobs_lab.env, "select ciphertext from publishing_hubtoken")
    assert TOKEN.encode() not in bytes(ciphertext)
    key_file = jobs_lab.home / "hf_token.key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"


def test_push_a_dataset_privately(api, hub, dataset_job):
    answer = call(
        api, "POST", "/api/dataset/push",
        json={"repo_id": "tester/qa-set", "private": True, "job_id": dataset_job["id"]},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True and body["url"] == f"{hub.url}/datasets/tester/qa-set"
    assert body["job"]["status"] == "succeeded"
    repo = hub.repos[("dataset", "tester/qa-set")]
    assert repo["private"] is True
    assert set(repo["files"]) == {"README.md", "train.jsonl", "valid.jsonl"}
    artifacts = jobs_lab_artifacts(dataset_job)
    assert repo["files"]["train.jsonl"] == (artifacts / "train.jsonl").read_bytes()
    card = repo["files"]["README.md"].decode()
    assert "tags:\n- mlx" in card and "completions" in card
    assert "train examples**: 8" in card and "valid examples**: 2" in card


def jobs_lab_artifacts(job: dict):
    from pathlib import Path

    return Path(job["artifact_path"])


def test_push_a_quantized_model(api, hub, quantize_job):
    assert quantize_job["status"] == "succeeded", quantize_job["error"]
    answer = call(
        api, "POST", "/api/quantize/push",
        json={"repo_id": "tester/smol-q4", "job_id": quantize_job["id"]},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["url"] == f"{hub.url}/tester/smol-q4"
    repo = hub.repos[("model", "tester/smol-q4")]
    assert repo["private"] is False
    folder = jobs_lab_artifacts(quantize_job) / "model"
    expected = {p.name for p in folder.iterdir() if p.is_file()} | {"README.md"}
    assert set(repo["files"]) == expected
    weights = repo["files"]["model.safetensors"]
    assert weights == (folder / "model.safetensors").read_bytes()  # through the LFS path
    card = repo["files"]["README.md"].decode()
    assert "library_name: mlx" in card and "- mlx" in card
    assert "Bits per weight**: 4.5" in card and "Group size**: 64" in card
    assert 'load("tester/smol-q4")' in card and DEFAULT_MODEL in card
    publish = answer.json()["job"]
    assert publish["kind"] == "publish" and publish["metrics"]["uploaded_files"] == len(expected)


@pytest.mark.parametrize(
    "body, error",
    [
        ([], "expected a JSON object"),
        ({}, "repo_id required"),
        ({"repo_id": "  "}, "repo_id required"),
        ({"repo_id": "a/b", "job_id": 5}, "job_id must be a nonempty string"),
        ({"repo_id": "a/b", "source_path": ""}, "source_path must be a nonempty string"),
        ({"repo_id": "a/b", "job_id": "x", "private": "yes"}, "private must be a boolean"),
        ({"repo_id": "a/b"}, "job_id or source_path required"),
        ({"repo_id": "a/b", "source_path": "../../etc"}, "must not contain '..'"),
        ({"repo_id": "a/b", "source_path": "/etc"}, "inside the lab's artifacts directory"),
        ({"repo_id": "a/b", "job_id": "00000000-0000-0000-0000-000000000000"}, "no job"),
        ({"repo_id": "bad repo!", "job_id": "x"}, "not a valid Hub repo id"),
    ],
)
def test_bad_push_requests(api, body, error):
    answer = call(api, "POST", "/api/quantize/push", json=body)
    assert answer.status_code == 400, answer.text
    assert error in answer.json()["error"] and answer.json()["ok"] is False


def test_wrong_kind_unfinished_job_and_symlink_escape(jobs_lab, api, dataset_job, tmp_path):
    wrong = call(
        api, "POST", "/api/quantize/push", json={"repo_id": "a/b", "job_id": dataset_job["id"]}
    )
    assert "is a dataset job, not a quantize job" in wrong.json()["error"]
    running = api.post(
        "/api/jobs",
        json={"kind": "quantize", "params": {"model": DEFAULT_MODEL, "name": "never-pushed"}},
    ).json()  # takes seconds: still queued or running when the push arrives
    early = call(
        api, "POST", "/api/quantize/push", json={"repo_id": "a/b", "job_id": running["id"]}
    )
    assert early.status_code == 400 and "has not succeeded" in early.json()["error"]
    api.post(f"/api/jobs/{running['id']}/cancel")
    escape = jobs_lab.home / "artifacts" / "escape"
    escape.symlink_to(tmp_path, target_is_directory=True)
    answer = call(
        api, "POST", "/api/dataset/push", json={"repo_id": "a/b", "source_path": "escape"}
    )
    assert (
        answer.status_code == 400
        and "inside the lab's artifacts directory" in answer.json()["error"]
    )


def test_a_source_path_is_one_finished_jobs_own_output(jobs_lab, api, dataset_job):
    """Never the whole artifacts folder (partial job folders included), nor another kind's."""
    for source in (".", "./", f".partial-{dataset_job['id']}"):
        (jobs_lab.home / "artifacts" / source).mkdir(exist_ok=True)
        answer = call(
            api, "POST", "/api/dataset/push", json={"repo_id": "a/b", "source_path": source}
        )
        assert answer.status_code == 400, (source, answer.text)
        assert "output folder of a finished dataset job" in answer.json()["error"]
    wrong_kind = call(
        api, "POST", "/api/quantize/push",
        json={"repo_id": "a/b", "source_path": dataset_job["id"]},
    )  # fmt: skip
    assert "finished quantize job" in wrong_kind.json()["error"]


def test_hub_errors_fail_the_publish_with_the_hubs_message(api, hub, dataset_job):
    hub.forbidden_repos.add("other/forbidden")
    answer = call(api, "POST", "/api/dataset/push",
                  json={"repo_id": "other/forbidden", "job_id": dataset_job["id"]})  # fmt: skip
    assert answer.status_code == 400 and "403" in answer.json()["error"]
    assert answer.json()["job"]["status"] == "failed"
    hub.fail_commit_with = 409
    try:
        answer = call(api, "POST", "/api/dataset/push",
                      json={"repo_id": "tester/conflict", "job_id": dataset_job["id"]})  # fmt: skip
    finally:
        hub.fail_commit_with = None
    assert answer.status_code == 400 and "409" in answer.json()["error"]
    user = hub.tokens.pop(TOKEN)  # the Hub no longer accepts the saved token
    try:
        answer = call(api, "POST", "/api/dataset/push",
                      json={"repo_id": "tester/unauthorized", "job_id": dataset_job["id"]})  # fmt: skip
    finally:
        hub.tokens[TOKEN] = user
    assert answer.status_code == 400 and "401" in answer.json()["error"]


def test_no_token_no_push(api, dataset_job):
    call(api, "DELETE", "/api/settings/hf-token")
    answer = call(
        api, "POST", "/api/dataset/push", json={"repo_id": "a/b", "job_id": dataset_job["id"]}
    )
    assert answer.status_code == 400 and "no Hugging Face token is saved" in answer.json()["error"]
    call(api, "POST", "/api/settings/hf-token", json={"token": TOKEN})


def test_the_token_is_in_no_answer_and_no_log(jobs_lab):
    assert seen_bodies and not any(TOKEN in body for body in seen_bodies)
    logs = [jobs_lab.server.log(), jobs_lab.worker.log()]
    assert not any(TOKEN in log for log in logs)
    assert os.environ.get("HF_TOKEN") != TOKEN


def test_a_client_that_hangs_up_cancels_the_upload(jobs_lab, api, hub, dataset_job):
    import httpx

    hub.preupload_delay = 8.0
    try:
        with pytest.raises(httpx.ReadTimeout):
            api.post(
                "/api/dataset/push",
                json={"repo_id": "tester/abandoned", "job_id": dataset_job["id"]},
                timeout=3,
            )
        # (the push was queued before the client gave up)
        publishes = api.get("/api/jobs", params={"kind": "publish"}).json()["results"]
        job = next(j for j in publishes if j["params"]["repo_id"] == "tester/abandoned")
        ended = jobs_lab.wait_job(job["id"], timeout=60)
    finally:
        hub.preupload_delay = 0.0
    assert ended["status"] == "cancelled"
    assert "499" in jobs_lab.server.log() or ended["cancel_requested"]
    time.sleep(6)  # past the slow preupload: a live upload would have committed by now
    repo = hub.repos.get(("dataset", "tester/abandoned"), {"commits": []})
    assert repo["commits"] == []  # the upload stopped before its commit
