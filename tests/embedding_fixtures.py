"""The embedding and rerank models of the live-server tests (tests/api, tests/ui), built and
registered once a session in the session's server (conftest.py imports these fixtures).

The builders import MLX: they are imported inside the fixtures, since conftest.py imports
this module before it puts the optimized BLAS under MLX (prepare_mlx_process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

REGISTER = """
from pathlib import Path
from inference.model_registry import model_register
for name, path in {folders!r}.items():
    model_register(name=name, path=Path(path))
"""


@pytest.fixture(scope="session")
def embedding_folders(tmp_path_factory) -> dict:
    from tests.architecture_models import DEFAULT_TOKENIZER_DIR
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
    """The embedding and rerank models, registered once in the session server's registry."""
    folders = {name: str(folder) for name, folder in embedding_folders.items()}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", REGISTER.format(folders=folders)],
        cwd=ROOT, env=lab_server.env, check=True, capture_output=True,
    )  # fmt: skip
    return embedding_folders
