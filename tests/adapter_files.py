"""Real adapters for the tests: random LoRAs of the default model in mlx-lm's format, and
their registration in a live server's database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx

from inference.protocol.adapters import AdapterRef

if TYPE_CHECKING:
    from tests.conftest import LiveServer

ROOT = Path(__file__).resolve().parent.parent


def write_adapter(
    folder: Path, seed: int, layers: tuple = (26, 27, 28, 29), rank: int = 4, scale: float = 20.0
) -> AdapterRef:
    """A random LoRA on q_proj and v_proj of the last layers, in mlx-lm's adapter format."""
    folder.mkdir()
    mx.random.seed(seed)
    weights = {}
    for layer in layers:
        for name, out in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"model.layers.{layer}.self_attn.{name}"
            weights[f"{prefix}.lora_a"] = mx.random.normal((576, rank)) * 0.05
            weights[f"{prefix}.lora_b"] = mx.random.normal((rank, out)) * 0.05
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {
        "fine_tune_type": "lora",
        "num_layers": len(layers),
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0,
                            "keys": ["self_attn.q_proj", "self_attn.v_proj"]},
    }  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return AdapterRef(name=folder.name, path=str(folder))


REGISTER = """
from inference.models import Adapter
Adapter.objects.update_or_create(name={name!r}, defaults=dict(base_model={base!r}, path={path!r}))
"""


def register_adapter(server: LiveServer, ref: AdapterRef, base_model: str) -> AdapterRef:
    """`ref` in the registry of the server's database (as a finetune job leaves it)."""
    code = REGISTER.format(name=ref.name, base=base_model, path=ref.path)
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=server.env, check=True
    )
    return ref
