"""The vision-language models of the engine and live-server tests (tests/engine, tests/api),
built once a session, and registered in the session's server where a test asks for them
(conftest.py imports these fixtures): a tiny Qwen2.5-VL (mRoPE), a tiny SmolVLM
(Idefics3: plain RoPE, tiled images), a tiny SmolVLM2 (the same model, its own processor),
a tiny Gemma 3 (sliding windows), a tiny Qwen3-VL (mRoPE and deepstack features) and a tiny
Gemma 3n (audio).

The builders import MLX: they are imported inside the fixtures, since conftest.py imports
this module before it puts the optimized BLAS under MLX (prepare_mlx_process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.embedding_fixtures import REGISTER

ROOT = Path(__file__).resolve().parent.parent
__all__ = [  # conftest's
    "gemma3_folder",
    "gemma3_model",
    "gemma3n_folder",
    "gemma3n_model",
    "qwen3_vl_folder",
    "qwen3_vl_model",
    "smolvlm_folder",
    "smolvlm_model",
    "smolvlm2_folder",
    "vision_folder",
    "vision_model",
]


@pytest.fixture(scope="session")
def vision_folder(tmp_path_factory) -> Path:
    """A tiny random-weight Qwen2.5-VL, its processor the real one (tests/vlm_files)."""
    from tests.vision_models import QWEN2_5_VL_MODEL, build_qwen2_5_vl_folder

    return build_qwen2_5_vl_folder(tmp_path_factory.mktemp("vision-models") / QWEN2_5_VL_MODEL)


@pytest.fixture(scope="session")
def smolvlm_folder(tmp_path_factory) -> Path:
    """A tiny random-weight SmolVLM (model type idefics3), its processor the real one."""
    from tests.vision_models import IDEFICS3_MODEL, build_idefics3_folder

    return build_idefics3_folder(tmp_path_factory.mktemp("vision-models") / IDEFICS3_MODEL)


@pytest.fixture(scope="session")
def smolvlm2_folder(tmp_path_factory) -> Path:
    """A tiny random-weight SmolVLM2 (model type smolvlm), its processor the real one."""
    from tests.vision_models import SMOLVLM2, SMOLVLM2_MODEL, build_idefics3_folder

    folder = tmp_path_factory.mktemp("vision-models") / SMOLVLM2_MODEL
    return build_idefics3_folder(folder, family=SMOLVLM2)


@pytest.fixture(scope="session")
def gemma3_folder(tmp_path_factory) -> Path:
    """A tiny random-weight Gemma 3 (model type gemma3), its processor the real one."""
    from tests.vision_models import GEMMA3_MODEL, build_gemma3_folder

    return build_gemma3_folder(tmp_path_factory.mktemp("vision-models") / GEMMA3_MODEL)


@pytest.fixture(scope="session")
def qwen3_vl_folder(tmp_path_factory) -> Path:
    """A tiny random-weight Qwen3-VL (model type qwen3_vl), its processor the real one."""
    from tests.vision_models import QWEN3_VL_MODEL, build_qwen3_vl_folder

    return build_qwen3_vl_folder(tmp_path_factory.mktemp("vision-models") / QWEN3_VL_MODEL)


@pytest.fixture(scope="session")
def gemma3n_folder(tmp_path_factory) -> Path:
    """A tiny random-weight Gemma 3n (audio), its processor the real one."""
    from tests.audio_models import GEMMA3N_MODEL, build_gemma3n_folder

    return build_gemma3n_folder(tmp_path_factory.mktemp("audio-models") / GEMMA3N_MODEL)


def _register(lab_server, folder: Path) -> str:
    folders = {folder.name: str(folder)}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", REGISTER.format(folders=folders)],
        cwd=ROOT, env=lab_server.env, check=True, capture_output=True,
    )  # fmt: skip
    return folder.name


@pytest.fixture(scope="session")
def vision_model(lab_server, vision_folder) -> str:
    """The Qwen2.5-VL model, registered once in the session server's registry; its name."""
    return _register(lab_server, vision_folder)


@pytest.fixture(scope="session")
def smolvlm_model(lab_server, smolvlm_folder) -> str:
    """The SmolVLM model, registered once in the session server's registry; its name."""
    return _register(lab_server, smolvlm_folder)


@pytest.fixture(scope="session")
def gemma3n_model(lab_server, gemma3n_folder) -> str:
    """The Gemma 3n model, registered once in the session server's registry; its name."""
    return _register(lab_server, gemma3n_folder)


@pytest.fixture(scope="session")
def gemma3_model(lab_server, gemma3_folder) -> str:
    """The Gemma 3 model, registered once in the session server's registry; its name."""
    return _register(lab_server, gemma3_folder)


@pytest.fixture(scope="session")
def qwen3_vl_model(lab_server, qwen3_vl_folder) -> str:
    """The Qwen3-VL model, registered once in the session server's registry; its name."""
    return _register(lab_server, qwen3_vl_folder)
