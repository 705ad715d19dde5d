"""Pulling models from the Hub (the stand-in, through the real huggingface_hub client) on
the real Celery worker, then serving them through the openai SDK."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.conftest import DEFAULT_MODEL, ROOT

TOKEN = "hf_standin_token"  # the stand-in's user "tester"
PARIS = [{"role": "user", "content": "What is the capital of France?"}]


def repo_files(folder: Path, **config_changes) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    if config_changes:
        config = json.loads(files["config.json"]) | config_changes
        files["config.json"] = json.dumps(config).encode()
    return files


def pull(client, **params) -> dict:
    answer = client.post("/api/jobs", json={"kind": "pull", "params": params})
    assert answer.status_code == 202, answer.text
    return answer.json()


def registry(client) -> dict[str, dict]:
    return {m["name"]: m for m in client.get("/api/models").json()["results"]}


def worker_pid(client, model: str) -> int | None:
    workers = client.get("/engine").json()["workers"]
    return next((w["pid"] for w in workers if w["model"] == model), None)


def ask(jobs_lab, model: str, max_tokens: int = 8) -> str:
    sdk = openai.OpenAI(base_url=f"{jobs_lab.url}/v1", api_key=jobs_lab.api_key, timeout=300)
    reply = sdk.chat.completions.create(
        model=model, messages=PARIS, max_tokens=max_tokens, temperature=0
    )
    return reply.choices[0].message.content


@pytest.fixture(scope="module")
def client(jobs_lab):
    return jobs_lab.client()


@pytest.fixture(scope="module")
def float16_folder(tmp_path_factory, model_folder) -> Path:
    """The default model as a transformers-format repo holds it: float16, unquantized."""
    from mlx_lm.convert import convert

    folder = tmp_path_factory.mktemp("float16") / "model"
    convert(str(model_folder), str(folder), dequantize=True, dtype="float16")
    return folder


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    from inference.management.commands.ensure_default_model import embedded_gguf

    return embedded_gguf()


@pytest.fixture(scope="module")
def repos(hub, model_folder, float16_folder, gguf_path, tiny_model_folder) -> dict[str, str]:
    """The stand-in's model repos of this module, by id: their commits."""
    readme = {"README.md": b"# a model card\n"}
    return {
        "mlx-community/smol-pull": hub.add_model_repo(
            "mlx-community/smol-pull", repo_files(model_folder) | readme, library_name="mlx"
        ),
        "HuggingFaceTB/smol-f16": hub.add_model_repo(
            "HuggingFaceTB/smol-f16", repo_files(float16_folder)
        ),
        "bartowski/smol-gguf": hub.add_model_repo(
            "bartowski/smol-gguf", {gguf_path.name: gguf_path.read_bytes()} | readme
        ),
        "someone/smol-whisper": hub.add_model_repo(
            "someone/smol-whisper",
            repo_files(tiny_model_folder, model_type="whisper"),
            downloads=10**6,
        ),  # fmt: skip
    }


@pytest.fixture
def throttled(hub):
    hub.throttle_bytes_per_second = 2_000_000
    yield hub
    hub.throttle_bytes_per_second = None


def test_an_mlx_repo_is_pulled_as_it_is_and_answers(jobs_lab, repos, client, model_folder):
    commit = repos["mlx-community/smol-pull"]
    job = jobs_lab.wait_job(pull(client, repo_id="mlx-community/smol-pull")["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["result"]["model"] == "smol-pull" and job["result"]["format"] == "mlx"
    assert job["result"]["commit"] == commit
    assert job["metrics"]["bytes_total"] == job["result"]["download_bytes"]
    model = registry(client)["smol-pull"]
    assert model["repo_id"] == "mlx-community/smol-pull" and model["commit"] == commit
    folder = Path(jobs_lab.home / "models" / "smol-pull" / commit[:12])
    assert (folder / "model.safetensors").read_bytes() == (
        model_folder / "model.safetensors"
    ).read_bytes()
    assert not (folder / "README.md").exists()  # only what serving needs
    assert model["disk_bytes"] > 90_000_000 and model["files_managed"] is True
    assert "Paris" in ask(jobs_lab, "smol-pull")


def test_a_transformers_repo_is_converted_and_quantized(jobs_lab, repos, client):
    job = pull(client, repo_id="HuggingFaceTB/smol-f16", quantize={"bits": 4, "group_size": 32})
    assert job["params"]["name"] == "smol-f16-q4"
    job = jobs_lab.wait_job(job["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["result"]["format"] == "transformers"
    model = registry(client)["smol-f16-q4"]
    assert model["quantization"].startswith("4-bit affine, group 32")
    assert model["disk_bytes"] < 0.5 * job["result"]["download_bytes"]
    assert "Paris" in ask(jobs_lab, "smol-f16-q4")


def test_a_gguf_repo_goes_through_the_importer(jobs_lab, repos, client, gguf_path):
    job = jobs_lab.wait_job(pull(client, repo_id="bartowski/smol-gguf", name="smol-gguf")["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["result"]["format"] == "gguf" and job["result"]["gguf_file"] == gguf_path.name
    assert registry(client)["smol-gguf"]["quantization"] == "4-bit affine, group 32"
    assert "Paris" in ask(jobs_lab, "smol-gguf")


def test_search_lists_mlx_repos_first_and_says_what_is_servable(repos, client):
    answer = client.get("/api/hub/models", params={"search": "smol", "limit": 10})
    assert answer.status_code == 200, answer.text
    found = answer.json()["results"]
    ids = [r["id"] for r in found]
    assert ids.index("mlx-community/smol-pull") < ids.index("someone/smol-whisper")
    by_id = {r["id"]: r for r in found}
    assert by_id["mlx-community/smol-pull"]["servable"] is True
    assert by_id["mlx-community/smol-pull"]["format"] == "mlx"
    assert by_id["mlx-community/smol-pull"]["size_bytes"] > 90_000_000
    # An architecture neither mlx-lm nor (as an encoder) mlx-embeddings loads.
    whisper = by_id["someone/smol-whisper"]
    assert whisper["servable"] is False
    assert "whisper" in whisper["reason"] and "mlx-lm" in whisper["reason"]
    gguf = by_id["bartowski/smol-gguf"]
    assert gguf["format"] == "gguf" and gguf["gguf_files"][0]["quantization"] == "Q4_1"
    assert gguf["gguf_files"][0]["importable"] is True
    bad = client.get("/api/hub/models", params={"sort": "nonsense"})
    assert bad.status_code == 400 and "sort must be one of" in bad.json()["detail"]


def test_an_architecture_mlx_lm_cannot_load_is_refused_before_downloading(jobs_lab, hub, client):
    job = jobs_lab.wait_job(pull(client, repo_id="someone/smol-whisper")["id"])
    assert job["status"] == "failed"
    assert "model_type 'whisper' is not supported by mlx-lm 0.32" in job["error"]
    assert hub.bytes_served.get(("someone/smol-whisper", "model.safetensors"), 0) == 0


MISTRAL3_VISION = {"model_type": "mistral3", "vision_config": {"hidden_size": 8}}


@pytest.fixture(scope="module")
def vision_repos(
    hub, smolvlm_folder, gemma3_folder, qwen3_vl_folder, tiny_model_folder
) -> list[str]:
    """SmolVLM (a family the engine serves with its images) in MLX and transformers
    format, Gemma 3 and Qwen3-VL (two more) in MLX format, and Mistral 3 with a vision tower
    (mlx-vlm's; served as text, without them)."""
    hub.add_model_repo("mlx-community/tiny-smolvlm", repo_files(smolvlm_folder), library_name="mlx")
    hub.add_model_repo("HuggingFaceTB/tiny-smolvlm", repo_files(smolvlm_folder))
    hub.add_model_repo("mlx-community/tiny-gemma3", repo_files(gemma3_folder), library_name="mlx")
    hub.add_model_repo(
        "mlx-community/tiny-qwen3-vl", repo_files(qwen3_vl_folder), library_name="mlx"
    )
    hub.add_model_repo(
        "mistralai/tiny-mistral3-vl", repo_files(tiny_model_folder, **MISTRAL3_VISION)
    )
    return ["mlx-community/tiny-smolvlm", "HuggingFaceTB/tiny-smolvlm",
            "mlx-community/tiny-gemma3", "mlx-community/tiny-qwen3-vl",
            "mistralai/tiny-mistral3-vl"]  # fmt: skip


def test_search_says_which_vision_models_are_servable(vision_repos, client):
    answer = client.get("/api/hub/models", params={"search": "tiny-", "limit": 20})
    assert answer.status_code == 200, answer.text
    by_id = {r["id"]: r for r in answer.json()["results"]}
    mlx, transformers, gemma, qwen3_vl, mistral = (by_id[repo] for repo in vision_repos)
    assert mlx["servable"] is True and mlx["model_type"] == "idefics3"
    assert mlx["reason"] == "idefics3: takes images (mlx-vlm), served as it is"
    assert transformers["servable"] is True
    assert (
        transformers["reason"] == "idefics3: takes images (mlx-vlm), converted to MLX when pulled"
    )
    assert gemma["servable"] is True and gemma["model_type"] == "gemma3"
    assert gemma["reason"] == "gemma3: takes images (mlx-vlm), served as it is"
    assert qwen3_vl["servable"] is True
    assert qwen3_vl["reason"] == "qwen3_vl: takes images (mlx-vlm), served as it is"
    # A family whose images the lab does not serve yet, which mlx-lm loads: text, as before.
    assert mistral["servable"] is True
    assert mistral["reason"].startswith("mistral3: its images are not served yet for this family")


def test_a_vision_model_is_pulled_and_sees_an_image(jobs_lab, hub, vision_repos, client):
    from tests.vision_models import png

    job = jobs_lab.wait_job(pull(client, repo_id="mlx-community/tiny-smolvlm")["id"])
    assert job["status"] == "succeeded", job["error"]
    assert registry(client)["tiny-smolvlm"]["capabilities"] == ["chat", "vision"]
    sdk = openai.OpenAI(base_url=f"{jobs_lab.url}/v1", api_key=jobs_lab.api_key, timeout=300)
    url = "data:image/png;base64," + base64.b64encode(png(112, 28, seed=1)).decode()
    image = {"type": "image_url", "image_url": {"url": url}}
    reply = sdk.chat.completions.create(
        model="tiny-smolvlm", max_tokens=2, temperature=0,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}],
    )  # fmt: skip
    assert reply.usage.prompt_tokens > 5 * 64  # four tiles and a global one, 64 each


def test_a_disk_without_room_is_refused(jobs_lab, hub, client, tiny_model_folder):
    hub.add_model_repo("someone/huge", repo_files(tiny_model_folder))
    hub.declared_sizes[("someone/huge", "model.safetensors")] = 10**15
    job = jobs_lab.wait_job(pull(client, repo_id="someone/huge")["id"])
    assert job["status"] == "failed"
    # The weights and the converted copy (a transformers-format repo is converted).
    assert re.fullmatch(r"needs 1818\.99 TB, [\d.]+ [KMGT]?B free under .*models", job["error"])


def test_a_gated_repo_needs_a_token_with_access(jobs_lab, hub, client, tiny_model_folder):
    hub.add_model_repo("meta/tiny-gated", repo_files(tiny_model_folder), gated=True)
    client.delete("/api/settings/hf-token")
    job = jobs_lab.wait_job(pull(client, repo_id="meta/tiny-gated")["id"])
    assert job["status"] == "failed"
    assert job["error"] == (
        "this repository is gated: accept its terms on the Hub and save a token with read"
        " access in Settings"
    )
    saved = client.post("/api/settings/hf-token", json={"token": TOKEN})
    assert saved.status_code == 200, saved.text
    hub.grants.setdefault("meta/tiny-gated", set()).add("tester")
    try:
        job = jobs_lab.wait_job(pull(client, repo_id="meta/tiny-gated")["id"])
    finally:
        client.delete("/api/settings/hf-token")
    assert job["status"] == "succeeded", job["error"]
    assert job["result"]["model"] == "tiny-gated"


def test_a_killed_worker_leaves_nothing_registered_and_the_next_pull_resumes(
    jobs_lab, throttled, client, tiny_model_folder
):
    files = repo_files(tiny_model_folder)
    weights = len(files["model.safetensors"])
    throttled.add_model_repo("someone/tiny-resume", files)
    job = pull(client, repo_id="someone/tiny-resume")
    running = jobs_lab.wait_running(job["id"])
    while running["metrics"].get("bytes_done", 0) < weights // 3:
        running = jobs_lab.wait_running(job["id"])
    jobs_lab.worker.kill()
    jobs_lab.worker.start()
    lost = jobs_lab.wait_job(job["id"])
    assert lost["status"] == "failed" and "stopped while running" in lost["error"]
    assert "tiny-resume" not in registry(client)
    sent_before = throttled.bytes_served[("someone/tiny-resume", "model.safetensors")]
    throttled.throttle_bytes_per_second = None
    again = jobs_lab.wait_job(pull(client, repo_id="someone/tiny-resume")["id"])
    assert again["status"] == "succeeded", again["error"]
    sent_after = throttled.bytes_served[("someone/tiny-resume", "model.safetensors")]
    assert 0 < sent_after - sent_before < weights  # only the part it lacked
    assert again["result"]["bytes_received"] < again["result"]["download_bytes"]


def test_a_cancelled_pull_registers_nothing(jobs_lab, throttled, client, tiny_model_folder):
    throttled.add_model_repo("someone/tiny-cancel", repo_files(tiny_model_folder))
    job = pull(client, repo_id="someone/tiny-cancel")
    jobs_lab.wait_running(job["id"], min_progress=0.05)
    assert client.post(f"/api/jobs/{job['id']}/cancel").status_code == 200
    ended = jobs_lab.wait_job(job["id"])
    assert ended["status"] == "cancelled"
    assert "tiny-cancel" not in registry(client)
    assert not (jobs_lab.home / "models" / "tiny-cancel").exists()


def test_an_update_is_seen_and_a_second_pull_replaces_the_folder(
    jobs_lab, hub, client, tiny_model_folder
):
    files = repo_files(tiny_model_folder)
    first = hub.add_model_repo("someone/tiny-update", files)
    job = jobs_lab.wait_job(pull(client, repo_id="someone/tiny-update")["id"])
    assert job["status"] == "succeeded", job["error"]
    assert client.get("/api/models/tiny-update/update").json()["update_available"] is False
    ask(jobs_lab, "tiny-update", max_tokens=2)  # resident: the update must reload it
    before = worker_pid(client, "tiny-update")
    second = hub.update_model_repo("someone/tiny-update", {"README.md": b"# new card\n"})
    check = client.get("/api/models/tiny-update/update").json()
    assert check == {
        "name": "tiny-update", "repo_id": "someone/tiny-update", "revision": "main",
        "commit": first, "latest": second, "update_available": True,
    }  # fmt: skip
    job = jobs_lab.wait_job(pull(client, repo_id="someone/tiny-update", name="tiny-update")["id"])
    assert job["status"] == "succeeded", job["error"]
    models = jobs_lab.home / "models" / "tiny-update"
    assert sorted(p.name for p in models.iterdir()) == [second[:12]]
    assert registry(client)["tiny-update"]["commit"] == second
    ask(jobs_lab, "tiny-update", max_tokens=2)
    assert worker_pid(client, "tiny-update") not in (None, before)  # a new worker, new folder


def test_delete_removes_the_row_and_the_files_under_models(jobs_lab, client):
    folder = jobs_lab.home / "models" / "tiny-update"
    assert folder.is_dir()
    loaded = client.delete("/api/models/tiny-update")  # the update test left it loaded
    assert loaded.status_code == 409 and "unload it first" in loaded.json()["detail"]
    assert client.post("/api/models/tiny-update/unload").status_code == 200
    answer = client.delete("/api/models/tiny-update")
    assert answer.status_code == 200, answer.text
    assert answer.json()["deleted"] is True and answer.json()["freed_bytes"] > 10_000_000
    assert not folder.exists() and "tiny-update" not in registry(client)
    default = client.delete(f"/api/models/{DEFAULT_MODEL}")
    assert default.status_code == 409 and "default model" in default.json()["detail"]
    assert client.delete("/api/models/no-such-model").status_code == 404


def test_bad_pull_params_are_a_400(client):
    for params, words in [
        ({}, "repo_id is required"),
        ({"repo_id": "../etc"}, "repo_id must look like"),
        ({"repo_id": "a/b", "quantize": {"bits": 3.5}}, "bits must be an integer"),
        ({"repo_id": "a/b", "name": DEFAULT_MODEL}, "already a model in the registry"),
        ({"repo_id": "a/b", "gguf_file": "x.bin"}, "gguf_file must name a .gguf"),
    ]:
        answer = client.post("/api/jobs", json={"kind": "pull", "params": params})
        assert answer.status_code == 400 and words in answer.json()["detail"], answer.text


def test_the_pull_command_runs_the_job_here(jobs_lab, hub, tiny_model_folder):
    hub.add_model_repo("someone/tiny-cli", repo_files(tiny_model_folder), library_name="mlx")
    done = subprocess.run(
        [sys.executable, "manage.py", "pull", "someone/tiny-cli", "--name", "tiny-cli"],
        cwd=ROOT, env=jobs_lab.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pulled tiny-cli (")
    assert "] 100% finished" in done.stderr  # the progress bar's last state
    refused = subprocess.run(
        [sys.executable, "manage.py", "pull", "../x"],
        cwd=ROOT, env=jobs_lab.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 1 and "repo_id must look like" in refused.stderr


def test_offline_a_repo_in_the_local_cache_still_pulls(jobs_lab, hub, tiny_model_folder):
    from huggingface_hub import snapshot_download

    commit = hub.add_model_repo("someone/tiny-cached", repo_files(tiny_model_folder))
    hf_home = jobs_lab.home / "offline-hf-home"
    snapshot_download(
        "someone/tiny-cached", endpoint=hub.url, cache_dir=hf_home / "hub", token=False
    )
    served = sum(hub.bytes_served.get(("someone/tiny-cached", p), 0) for p in ("config.json",))
    env = {**jobs_lab.env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home)}
    done = subprocess.run(
        [sys.executable, "manage.py", "pull", "someone/tiny-cached", "--quantize", "8"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"pulled tiny-cached-q8 ({commit})\n"
    assert hub.bytes_served.get(("someone/tiny-cached", "config.json"), 0) == served
    missing = subprocess.run(
        [sys.executable, "manage.py", "pull", "someone/not-cached"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert missing.returncode == 1 and "not in the local Hugging Face cache" in missing.stderr


def test_search_says_when_the_lab_is_offline(monkeypatch):
    # The web process reads HF_HUB_OFFLINE at start: asked in-process instead.
    from huggingface_hub import constants

    from publishing.hub_search import search_models

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    found = search_models(
        search="x", author="", library="", pipeline_tag="", sort="downloads", limit=5
    )
    assert found["offline"] is True and found["results"] == []
    assert "HF_HUB_OFFLINE" in found["detail"]
