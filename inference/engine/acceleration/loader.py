"""Load an MLX model folder into memory, with the facts the server needs."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlx_lm import load

from ...protocol.media import config_media
from ...protocol.model_folder import read_context_length
from ..media.loading import load_vision_model
from . import compiled_mlp, cuda_decode, fused_projections
from .accelerator import on_gpu
from .dense_weights import FastPathOptions, FastPathReport, apply_fast_path

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: object
    tokenizer: object  # mlx_lm TokenizerWrapper
    context_length: int
    vocab_size: int
    path: Path
    fast_path: FastPathReport = field(
        default_factory=lambda: FastPathReport("quantized", "loaded without the fast path")
    )
    media: tuple[str, ...] = ()  # what it takes besides text (protocol/media.py): vision...
    processor: object | None = None  # mlx-vlm's, for a model that takes media


def load_model(path: str | Path, *, fast_path: FastPathOptions | None = None) -> LoadedModel:
    """Load weights and tokenizer from an MLX / Hugging Face format folder.

    On the CPU the quantized weights become dense float32 ones (the fast
    path) unless `fast_path` says otherwise or they exceed its memory budget. On a
    GPU, dense Llama layers run fused q/k/v and gate/up projections (fused_projections.py),
    and such models' one-token steps the native CUDA decode step (cuda_decode.py);
    with MLXLAB_COMPILED_MLP=1, the other layers' batched decode steps run the MLP half
    compiled (compiled_mlp.py).
    """
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    vocab_size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if media := config_media(config):
        return _load_vision(path, config, media, vocab_size)
    model, tokenizer = load(str(path))
    report = apply_fast_path(model, fast_path or FastPathOptions())
    log.info("%s runs on the %s path: %s", path.name, report.path, report.reason)
    if fused_projections.wanted(on_gpu()):
        fused_projections.fuse_projections(model)
        if cuda_decode.wanted(on_gpu()):
            installed = cuda_decode.install(model)
            step = "CUDA decode step" if installed else f"MLX's graph: {installed.why_not}"
            report = replace(report, gpu_step=step)
    if compiled_mlp.wanted(on_gpu()):
        compiled_mlp.compile_mlp_halves(model)
    return LoadedModel(
        model, tokenizer, read_context_length(config), vocab_size or len(tokenizer), path, report
    )


def _load_vision(path: Path, config: dict, media: tuple[str, ...], vocab_size) -> LoadedModel:
    """A model that takes media, through mlx-vlm: its language model as mlx-vlm runs it."""
    loaded = load_vision_model(path)
    report = FastPathReport("mlx-vlm", "loaded by mlx-vlm: its own layers, no fast path")
    log.info("%s takes %s: loaded by mlx-vlm", path.name, ", ".join(media))
    return LoadedModel(
        loaded.model,
        loaded.tokenizer,
        read_context_length(config),
        vocab_size or len(loaded.tokenizer),
        path,
        report,
        media=media,
        processor=loaded.processor,
    )
