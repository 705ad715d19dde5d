"""Load a vision-language folder through mlx-vlm: its model, its processor, and the text
tokenizer the prompt builder and the detokenizer use (mlx-lm's, over the same files).

The chat template is the one mlx-vlm's processor uses: a `chat_template.json` (where VLM
repos keep it) over tokenizer_config.json's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .model import VisionLanguageModel


@dataclass(frozen=True)
class VisionLoad:
    model: VisionLanguageModel
    tokenizer: object  # mlx-lm's TokenizerWrapper
    processor: object  # mlx-vlm's (a transformers ProcessorMixin)


def load_vision_model(path: Path) -> VisionLoad:
    from mlx_lm.utils import load_config, load_tokenizer
    from mlx_vlm import load

    vlm, processor = load(str(path))
    template = getattr(getattr(processor, "tokenizer", processor), "chat_template", None)
    tokenizer = load_tokenizer(
        path,
        {"chat_template": template} if template else None,
        eos_token_ids=load_config(path).get("eos_token_id"),
    )
    return VisionLoad(VisionLanguageModel(vlm), tokenizer, processor)
