"""A Llama shape of bench/gpu_models.py written as an f16 GGUF file, for llama.cpp to read
the same random weights MLX Lab's engine reads.

    python3 bench/gguf_llama.py --shape llama-1b-bf16 --gguf-py DIR --out FILE.gguf

The weights are `build_folder`'s (seed 0, bf16), built here into a folder beside the file,
each tensor converted to f16 (the type llama.cpp's CUDA build serves best; the same two
bytes a weight as bf16). llama.cpp's `llama` architecture rotates interleaved pairs where
the Hugging Face layout rotates halves, so q and k are permuted as its own converter does.
The tokenizer metadata is the default model's GGUF's (the same 49,152 tokens). `--gguf-py`
is llama.cpp's gguf-py folder (in its source, which scripts/gpu-llama-cpp.sh carries).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu_models import SHAPES, Shape, build_folder  # noqa: E402
from bench.llama_cpp import gguf_file  # noqa: E402

TOKENIZER = ROOT / "var" / "models" / "smollm2-135m-instruct"
TOKENIZER_KEYS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")
NAMES = {  # mlx-lm's parameter names -> llama.cpp's, per layer
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}  # fmt: skip


def interleaved(weight, heads: int):
    """Rows of each head reordered from halves (HF) to pairs (llama.cpp's rope)."""
    rows, columns = weight.shape
    return (
        weight.reshape(heads, 2, rows // heads // 2, columns).swapaxes(1, 2).reshape(rows, columns)
    )


def gguf_tensors(folder: Path, shape: Shape) -> dict:
    import mlx.core as mx
    import numpy as np

    weights = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(mx.load(str(path)))
    out = {}
    for name, value in weights.items():
        array = np.array(value.astype(mx.float32))
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = array.astype(np.float16)
        elif name == "model.norm.weight":
            out["output_norm.weight"] = array
        elif name == "lm_head.weight":
            out["output.weight"] = array.astype(np.float16)
        else:
            _, _, layer, *rest = name.split(".")
            module, kind = ".".join(rest[:-1]), rest[-1]
            if module.endswith("q_proj"):
                array = interleaved(array, shape.heads)
            elif module.endswith("k_proj"):
                array = interleaved(array, shape.kv_heads)
            norm = module.endswith("norm")  # float32 kept, as llama.cpp's converter keeps it
            out[f"blk.{layer}.{NAMES[module]}.{kind}"] = array if norm else array.astype(np.float16)
    return out


def write(shape: Shape, tensors: dict, out: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(str(gguf_file()))  # the default model's
    field = reader.fields
    config = shape.config()
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"{shape.name}-random")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(shape.hidden // shape.heads)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_vocab_size(shape.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model(field["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(field["tokenizer.ggml.pre"].contents())
    w.add_token_list(list(field["tokenizer.ggml.tokens"].contents()))
    w.add_token_types(list(field["tokenizer.ggml.token_type"].contents()))
    w.add_token_merges(list(field["tokenizer.ggml.merges"].contents()))
    for key in TOKENIZER_KEYS:
        if f"tokenizer.ggml.{key}" in field:
            w.add_uint32(f"tokenizer.ggml.{key}", int(field[f"tokenizer.ggml.{key}"].contents()))
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="llama-1b-bf16", choices=sorted(SHAPES))
    parser.add_argument("--gguf-py", type=Path, required=True, help="llama.cpp's gguf-py")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(args.gguf_py))
    shape = SHAPES[args.shape]
    if shape.bits:
        raise SystemExit(f"{shape.name} is quantized: this writes bf16 shapes as f16")
    folder = build_folder(shape, args.out.with_suffix(".mlx"), TOKENIZER)
    write(shape, gguf_tensors(folder, shape), args.out)
    print(f"written {args.out} ({args.out.stat().st_size / 2**20:.0f} MiB) from {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
