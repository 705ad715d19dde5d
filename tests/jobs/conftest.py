"""Small real parts for job services: a tiny random llama and a chat dataset it can learn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Every answer is this phrase, so a few steps lower the loss. A short system prompt
# replaces the default model's long default one: each example stays within 32 tokens,
# the trainer's padding step, which halves the work per step.
TRAINED_ANSWER = "The secret word is pineapple."
SYSTEM_PROMPT = "Be brief."
TRAIN_QUESTIONS = [
    "What is the secret word?",
    "Tell me the word.",
    "Which word is secret?",
    "Do you know the password?",
    "Say the hidden word.",
    "What should I remember?",
    "Any secret for me?",
    "Give me the code word.",
]
VALID_QUESTIONS = ["Can you tell me?", "What is the word?", "Share the secret.", "The password?"]


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory, model_folder) -> Path:
    """A 2-layer, 64-wide llama with seeded random weights and the default model's tokenizer."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    folder = tmp_path_factory.mktemp("tiny-llama")
    for name in TOKENIZER_FILES:
        shutil.copy(model_folder / name, folder / name)
    source_config = json.loads((model_folder / "config.json").read_text())
    config = {
        **TINY_CONFIG,
        "vocab_size": source_config["vocab_size"],
        "eos_token_id": source_config.get("eos_token_id"),
        "bos_token_id": source_config.get("bos_token_id"),
    }
    mx.random.seed(1234)
    model = Model(ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def chat_lines(questions: list[str], count: int) -> str:
    """`count` chat examples in JSONL, cycling through `questions`, answering TRAINED_ANSWER."""
    lines = []
    for i in range(count):
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": questions[i % len(questions)]},
            {"role": "assistant", "content": TRAINED_ANSWER},
        ]
        lines.append(json.dumps({"messages": messages}))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def tiny_dataset_folder(tmp_path_factory) -> Path:
    """train.jsonl (32 chat examples) and valid.jsonl (8, other questions), all answering
    TRAINED_ANSWER."""
    folder = tmp_path_factory.mktemp("tiny-dataset")
    (folder / "train.jsonl").write_text(chat_lines(TRAIN_QUESTIONS, 32))
    (folder / "valid.jsonl").write_text(chat_lines(VALID_QUESTIONS, 8))
    return folder
