"""Embedding models pulled from the Hub (the stand-in): a transformers-format decoder keeps
its sentence-transformers pooling through mlx-lm's conversion, an encoder is served as it
came (mlx-embeddings loads transformers' weights), and both then embed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from tests.architecture_models import DEFAULT_TOKENIZER_DIR
from tests.embedding_models import build_bert_folder, build_decoder_folder

DECODER_REPO, ENCODER_REPO = "someone/tiny-qwen3-embedding", "someone/tiny-bert-embedding"


def folder_files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def client(jobs_lab):
    return jobs_lab.client()


@pytest.fixture(scope="module")
def repos(hub, tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-repos")
    decoder = build_decoder_folder(
        root / "qwen3", DEFAULT_TOKENIZER_DIR, model_type="qwen3",
        pooling="lasttoken", normalize=True,
    )  # fmt: skip
    encoder = build_bert_folder(root / "bert")
    card = {"README.md": b"# an embedding model\n"}
    for repo, folder in ((DECODER_REPO, decoder), (ENCODER_REPO, encoder)):
        hub.add_model_repo(
            repo, folder_files(folder) | card, library_name="sentence-transformers",
            pipeline_tag="feature-extraction",
        )  # fmt: skip


def pulled(jobs_lab, client, repo_id: str, name: str) -> dict:
    answer = client.post(
        "/api/jobs", json={"kind": "pull", "params": {"repo_id": repo_id, "name": name}}
    )
    assert answer.status_code == 202, answer.text
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    return job


def test_pulled_embedding_models_keep_their_pooling_and_embed(jobs_lab, repos, client):
    decoder = pulled(jobs_lab, client, DECODER_REPO, "tiny-qwen3-embedding")
    assert decoder["result"]["format"] == "transformers"  # converted by mlx-lm
    encoder = pulled(jobs_lab, client, ENCODER_REPO, "tiny-bert-embedding")
    assert encoder["result"]["format"] == "transformers"  # served as it came
    folder = next((jobs_lab.home / "models" / "tiny-qwen3-embedding").iterdir())
    assert (folder / "modules.json").is_file() and (folder / "1_Pooling" / "config.json").is_file()

    listed = {m["id"]: m["capabilities"] for m in client.get("/v1/models").json()["data"]}
    assert listed["tiny-qwen3-embedding"] == listed["tiny-bert-embedding"] == ["embeddings"]
    sdk = openai.OpenAI(base_url=f"{jobs_lab.url}/v1", api_key=jobs_lab.api_key, timeout=300)
    for name, width in (("tiny-qwen3-embedding", 64), ("tiny-bert-embedding", 32)):
        response = sdk.embeddings.create(
            model=name, input=["a cat", "a dog"], encoding_format="float"
        )
        rows = np.array([item.embedding for item in response.data])
        assert rows.shape == (2, width)
        np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-4)
