"""Build the CUDA decode step and check it against mlx-lm; `make setup` runs this.

    .venv/bin/python native/cuda_decode/build.py [--force]

Only where MLX's CUDA wheel (mlx-cuda-*) and nvcc are installed; elsewhere it records why
not and says nothing. Quiet when nothing changed since the last build. A failed build or
self-test never fails setup: the engine then keeps MLX's own decode step, and
`build/status.json` says why.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = HERE / "build"
LOG = BUILD / "build.log"
sys.path.insert(0, str(ROOT))  # run as a script: native.extension lives at the root

from labsettings import engine_settings  # noqa: E402
from native import extension  # noqa: E402

CUDA_WHEELS = ("mlx-cuda-13", "mlx-cuda-12")

# A two-layer Llama with 64-wide heads, a Qwen3 with 128-wide ones (its q and k head norms
# random) and a Qwen2 (q/k/v biases), in bf16, then in 4 bits with an 8-bit embedding (as mlx-community's
# models): logits of one row and of left-padded batches against mlx-lm's own model, steps
# past a cache growth included.
SELF_TEST = """
import os, sys
sys.path.insert(0, sys.argv[1])
os.environ["MLXLAB_CUDA_DECODE_MAX_BATCH"] = "64"  # every batch the kernels take
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_lm.models import llama, qwen2, qwen3
from mlx_lm.models.cache import KVCache
from inference.engine.acceleration import cuda_decode, fused_projections
from inference.engine.kv.rows import RowsKVCache
from native.cuda_decode import load
config = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=512, rms_norm_eps=1e-5,
              rope_theta=10000.0, tie_word_embeddings=True)
native = load(sys.argv[2])
configs = {llama: config, qwen2: dict(config, model_type="qwen2"),
           qwen3: dict(config, model_type="qwen3", head_dim=128, max_position_embeddings=4096)}
# A quantized model in float16 too (the default model's): its 4-bit weights dequantize in
# half pairs, bfloat16 ones in bfloat16 pairs.
kinds = [(False, mx.bfloat16), (True, mx.bfloat16), (True, mx.float16)]
for family, (quantized, dtype) in [(family, kind) for family in configs for kind in kinds]:
    mx.random.seed(18)
    model = family.Model(family.ModelArgs.from_dict(configs[family]))
    model.update(tree_map(lambda p: p.astype(dtype), model.parameters()))
    model.update(tree_unflatten([(path, 1 + 0.5 * mx.random.normal(a.shape).astype(a.dtype))
                                 for path, a in tree_flatten(model.parameters())
                                 if path.endswith("norm.weight")]))
    own = type(model)
    if quantized:
        nn.quantize(model, class_predicate=lambda path, m: hasattr(m, "to_quantized") and
                    {"group_size": 32 if "embed" in path else 64, "bits": 8 if "embed" in path else 4})
    fused_projections.fuse_projections(model)
    assert cuda_decode.install(model, native)
    # 20 rows: past 16 a bf16 model's matmuls go through cuBLAS (src/gemm.h); 40: past 32 a
    # quantized model's step runs the cuBLAS path's kernels around its own matvecs.
    for prompts in ([list(range(1, 255))], [[3] * 4, list(range(5, 20))],
                    [[i + 1] * (3 + i % 4) for i in range(12)],
                    [[i + 1] * (3 + i % 5) for i in range(20)],
                    [[i + 1] * (3 + i % 6) for i in range(40)]):
        longest = max(map(len, prompts))
        pads = [longest - len(p) for p in prompts]
        inputs = mx.array([[0] * pad + p for pad, p in zip(pads, prompts)])
        make = (lambda: KVCache()) if len(prompts) == 1 else (lambda: RowsKVCache(pads))
        ours, theirs = [make() for _ in range(2)], [make() for _ in range(2)]
        own.__call__(model, inputs, cache=ours)
        own.__call__(model, inputs, cache=theirs)
        token = inputs[:, -1:]
        for _ in range(6):
            want = own.__call__(model, token, cache=theirs).astype(mx.float32)
            got = model(token, cache=ours).astype(mx.float32)
            error = mx.abs(want - got).max().item() / mx.abs(want).max().item()
            assert error < 0.05, f"logits differ by {error:.3f} of their largest ({own.__module__}, {quantized=}, {dtype=})"
            token = mx.argmax(want[:, -1], axis=-1)[:, None]
print("checked")
"""


def fingerprint() -> str:
    """What a build depends on, with the CUDA compiler and the GPUs it compiles for."""
    packages = ("mlx", *CUDA_WHEELS, "nanobind")
    target = f"{_nvcc()} {engine_settings.cuda_archs}"
    return extension.fingerprint(HERE, Path(__file__), packages, target)


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found is None and Path("/usr/local/cuda/bin/nvcc").exists():
        found = "/usr/local/cuda/bin/nvcc"
    return found


def why_not() -> str | None:
    """Why this machine cannot build the step, or None."""
    if all(extension.version(wheel) == "absent" for wheel in CUDA_WHEELS):
        return "mlx has no CUDA backend here (make setup installs it where a GPU answers)"
    if _nvcc() is None:
        return "nvcc (the CUDA compiler) is not installed"
    if shutil.which("cmake") is None:
        return "cmake is not installed"
    return None


def build() -> str | None:
    """Configure and compile into build/; None when it worked, else why not."""
    skipped = why_not()
    if skipped is not None:
        return f"skipped: {skipped}"
    return extension.cmake(
        HERE,
        BUILD,
        LOG,
        ROOT,
        f"-DCMAKE_CUDA_COMPILER={_nvcc()}",
        f"-DCMAKE_CUDA_ARCHITECTURES={engine_settings.cuda_archs}",
    )


def self_test(library: Path) -> tuple[str | None, str]:
    """Run the step against mlx-lm's model in a child; (why it failed, or None; '')."""
    why, _ = extension.self_test(SELF_TEST, [str(ROOT), str(library)], timeout=600)
    return why, " against mlx-lm"


if __name__ == "__main__":
    sys.exit(
        extension.build_once(
            __doc__.splitlines()[0],
            BUILD,
            "_cuda_decode*.so",
            fingerprint(),
            build,
            self_test,
            "the CUDA decode step",
        )  # fmt: skip
    )
