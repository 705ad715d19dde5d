import asyncio
import subprocess
import sys

import httpx
import openai
import pytest

from tests.architecture_models import DEFAULT_TOKENIZER_DIR
from tests.conftest import DEFAULT_MODEL, ROOT
from tests.embedding_models import (
    BERT,
    LLAMA,
    QWEN3,
    QWEN3_RERANKER,
    RERANKER,
    build_bert_cross_encoder_folder,
    build_bert_folder,
    build_decoder_folder,
    build_qwen3_reranker_folders,
)


@pytest.fixture(scope="session")
def client(lab_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{lab_server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture
def run_async(lab_server):
    """Run `scenario(client)` on a fresh event loop with its own AsyncOpenAI client."""

    def run(scenario):
        async def main():
            async with openai.AsyncOpenAI(
                base_url=f"{lab_server.url}/v1", api_key="unused", max_retries=0
            ) as client:
                return await scenario(client)

        return asyncio.run(main())

    return run


@pytest.fixture(scope="session")
def http(lab_server) -> httpx.Client:
    with httpx.Client(base_url=lab_server.url, timeout=120) as session:
        yield session


@pytest.fixture(scope="session")
def staff_http(lab_server) -> httpx.Client:
    """/stats, /engine and /health's detail, read as a staff user."""
    with lab_server.staff_client(timeout=120) as session:
        yield session


@pytest.fixture(scope="session")
def model() -> str:
    return DEFAULT_MODEL


REGISTER = """
from pathlib import Path
from inference.model_registry import model_register
for name, path in {folders!r}.items():
    model_register(name=name, path=Path(path))
"""


@pytest.fixture(scope="session")
def embedding_folders(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("embedding-models")
    return {
        BERT: build_bert_folder(root / BERT),
        QWEN3: build_decoder_folder(
            root / QWEN3, DEFAULT_TOKENIZER_DIR, model_type="qwen3",
            pooling="lasttoken", normalize=True,
        ),
        LLAMA: build_decoder_folder(
            root / LLAMA, DEFAULT_TOKENIZER_DIR, model_type="llama",
            pooling="mean_tokens", normalize=False,
        ),
        RERANKER: build_bert_cross_encoder_folder(root / RERANKER),
        QWEN3_RERANKER: build_qwen3_reranker_folders(
            root / QWEN3_RERANKER, DEFAULT_TOKENIZER_DIR
        )[0],
    }  # fmt: skip


@pytest.fixture(scope="session")
def embedding_models(lab_server, embedding_folders) -> dict:
    """The embedding and rerank models of test_embeddings.py and test_rerank.py,
    registered once in the session server's registry."""
    folders = {name: str(folder) for name, folder in embedding_folders.items()}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", REGISTER.format(folders=folders)],
        cwd=ROOT, env=lab_server.env, check=True, capture_output=True,
    )  # fmt: skip
    return embedding_folders
