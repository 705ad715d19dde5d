"""One stream of a Qwen3-0.6B-shaped model on llama.cpp against MLX Lab's engine, both on
the same 4-bit weights.

    .venv/bin/python bench/llama_cpp_qwen3.py [--tokens 128] [--no-build] [--threads 1,2]

The model is Qwen3-0.6B's shape (bench/families.py) with random weights, quantized by MLX
to 4 bits in groups of 32 (embedding and tied head included). The GGUF file llama.cpp reads
is written from those very tensors: MLX's affine groups (a scale and a bias for 32 weights)
are GGUF's Q4_1 blocks (d and m for 32), repacked nibble for nibble, so both sides compute
with the same numbers. The tokenizer is the default model's on both sides (its GGUF
tokenizer metadata copied, the vocabulary padded with unused tokens to Qwen3's 151,936
rows, so the head reads what Qwen3's does). llama.cpp runs in bench/llama_cpp.py's
environment (var/llamacpp-venv, built on first use), which also holds the `gguf` package
(llama.cpp's own GGUF writer) that writes the file. Writes var/bench/llama_cpp_qwen3.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from families import SHAPES  # noqa: E402
from llama_cpp import (  # noqa: E402
    LLAMA_SIDE,
    MODEL,
    PROMPT,
    engine_side,
    gguf_file,
    llama_python,
)

ROOT = HERE.parent
WORK = ROOT / "var" / "bench" / "qwen3-same-weights"
OUT = ROOT / "var" / "bench" / "llama_cpp_qwen3.json"
GGUF_PACKAGE = "gguf==0.19.0"
GROUP = 32  # Q4_1's block
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# Run in llama.cpp's environment: the GGUF file from the arrays the MLX side saved
# (tensors.npz: GGUF names, Q4_1 blocks as bytes or float32 norms) and the shape (meta.json),
# with the default model's tokenizer metadata, padded to the model's vocabulary.
WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import gguf
    folder, tokenizer_gguf, out = sys.argv[1], sys.argv[2], sys.argv[3]
    meta = json.load(open(f"{folder}/meta.json"))
    tensors = np.load(f"{folder}/tensors.npz")
    reader = gguf.GGUFReader(tokenizer_gguf)
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    merges = list(reader.fields["tokenizer.ggml.merges"].contents())
    pad = meta["vocab_size"] - len(tokens)
    tokens += [f"<|unused_{i}|>" for i in range(pad)]
    types += [int(gguf.TokenType.UNUSED)] * pad
    w = gguf.GGUFWriter(out, "qwen3")
    w.add_name("qwen3-0.6b-shape-random")
    w.add_context_length(4096)
    w.add_embedding_length(meta["hidden_size"])
    w.add_block_count(meta["num_hidden_layers"])
    w.add_feed_forward_length(meta["intermediate_size"])
    w.add_head_count(meta["num_attention_heads"])
    w.add_head_count_kv(meta["num_key_value_heads"])
    w.add_key_length(meta["head_dim"])
    w.add_value_length(meta["head_dim"])
    w.add_layer_norm_rms_eps(meta["rms_norm_eps"])
    w.add_rope_freq_base(meta["rope_theta"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_tokenizer_model(reader.fields["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(reader.fields["tokenizer.ggml.pre"].contents())
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                     ("unknown_token_id", w.add_unk_token_id),
                     ("padding_token_id", w.add_pad_token_id)):
        if f"tokenizer.ggml.{key}" in reader.fields:
            add(int(reader.fields[f"tokenizer.ggml.{key}"].contents()))
    for name in meta["order"]:
        array = tensors[name]
        if array.dtype == np.uint8:
            w.add_tensor(name, array, raw_shape=array.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("written", out)
    """
)


def build_model(folder: Path) -> dict:
    """The Qwen3-0.6B shape with random weights, 4 bits in groups of 32, saved for mlx-lm
    (float16 scales and biases, as Q4_1's); returns its config."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_map
    from mlx_lm.models import qwen3
    from mlx_lm.utils import save_config, save_model

    _, shape = SHAPES["qwen3 (Qwen3-0.6B)"]
    config = {"model_type": "qwen3", **shape}
    mx.random.seed(0)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    model.update(tree_map(lambda p: (p * 0.5).astype(mx.float16), model.parameters()))
    nn.quantize(model, group_size=GROUP, bits=4)
    mx.eval(model.parameters())
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, model)
    config["quantization"] = {"group_size": GROUP, "bits": 4}
    save_config(dict(config), config_path=folder / "config.json")
    for file in TOKENIZER_FILES:
        shutil.copy(MODEL / file, folder / file)
    return config


def q4_1_blocks(weight, scales, biases):
    """MLX's packed 4-bit rows (8 nibbles a word, low first) with their float16 scales and
    biases, as GGUF's Q4_1 blocks: d, m, then 16 bytes (byte j: value j low, j + 16 high)."""
    import numpy as np

    words = np.array(weight).view(np.uint32)
    rows = words.shape[0]
    nibbles = (words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
    values = nibbles.reshape(rows, -1, GROUP).astype(np.uint8)
    packed = values[..., :16] | (values[..., 16:] << 4)
    d = np.array(scales).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    m = np.array(biases).astype(np.float16).view(np.uint8).reshape(rows, -1, 2)
    return np.concatenate([d, m, packed], axis=-1).reshape(rows, -1)


GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_tensors(folder: Path, config: dict) -> None:
    """The saved model's tensors under GGUF's names (tensors.npz) and their order and the
    shape (meta.json), for WRITER."""
    import mlx.core as mx
    import numpy as np

    weights = mx.load(str(folder / "model.safetensors"))
    out: dict[str, np.ndarray] = {}

    def matrix(prefix: str, name: str) -> None:
        w, s, b = (weights[f"{prefix}.{part}"] for part in ("weight", "scales", "biases"))
        out[name] = q4_1_blocks(w, s, b)

    def norm(prefix: str, name: str) -> None:
        out[name] = np.array(weights[f"{prefix}.weight"].astype(mx.float32))

    matrix("model.embed_tokens", "token_embd.weight")
    norm("model.norm", "output_norm.weight")
    for layer in range(config["num_hidden_layers"]):
        for ours, theirs in GGUF_NAMES.items():
            prefix, name = f"model.layers.{layer}.{ours}", f"blk.{layer}.{theirs}.weight"
            (norm if ours.endswith("norm") else matrix)(prefix, name)
    np.savez(folder / "tensors.npz", **out)
    meta = {**config, "order": list(out)}
    (folder / "meta.json").write_text(json.dumps(meta))


def write_gguf(python: Path, folder: Path) -> Path:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", GGUF_PACKAGE], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"could not install {GGUF_PACKAGE} for llama.cpp: {done.stderr[-500:]}")
    out = folder / "qwen3-0.6b-q4_1.gguf"
    argv = [str(python), "-c", WRITER, str(folder), str(gguf_file()), str(out)]
    subprocess.run(argv, check=True)
    return out


def llama_side(python: Path, gguf: Path, tokens: int, threads: int) -> dict:
    argv = [str(python), "-c", LLAMA_SIDE, str(gguf), PROMPT, str(tokens), str(threads)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX
    python = llama_python(build=not args.no_build)
    if python is None:
        raise SystemExit(1)
    config = build_model(WORK)
    gguf_tensors(WORK, config)
    gguf = write_gguf(python, WORK)
    results = {"weights_mb": round(gguf.stat().st_size / 2**20, 1)}
    for threads in map(int, args.threads.split(",")):
        results[f"llama_cpp_{threads}t"] = llama_side(python, gguf, args.tokens, threads)
        print(f"llama.cpp, {threads} threads:", results[f"llama_cpp_{threads}t"], flush=True)
        results[f"engine_{threads}t"] = engine_side(args.tokens, threads=threads, model=WORK)
        print(f"MLX Lab, {threads} kernel threads:", results[f"engine_{threads}t"], flush=True)
    best = max(r.get("decode_tps", 0) for k, r in results.items() if k.startswith("llama_cpp"))
    ours = max(r.get("decode_tps", 0) for k, r in results.items() if k.startswith("engine"))
    results["decode_ratio"] = round(ours / best, 3) if best else None
    print("decode, MLX Lab's best against llama.cpp's best:", results["decode_ratio"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
