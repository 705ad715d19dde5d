"""Build the CUDA decode step and check it against mlx-lm; `make setup` runs this.

    .venv/bin/python native/cuda_decode/build.py [--force]

Only where MLX's CUDA wheel (mlx-cuda-*) and nvcc are installed; elsewhere it records why
not and says nothing. Quiet when nothing changed since the last build. A failed build or
self-test never fails setup: the engine then keeps MLX's own decode step, and
`build/status.json` says why.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
STATUS = BUILD / "status.json"
LOG = BUILD / "build.log"
CUDA_WHEELS = ("mlx-cuda-13", "mlx-cuda-12")
# Which GPUs to compile for (CMAKE_CUDA_ARCHITECTURES): the one in this machine by default.
ARCHS_VARIABLE = "MLXLAB_CUDA_ARCHS"

# A two-layer model with 64-wide heads: logits of one row and of a left-padded batch
# against mlx-lm's own model, steps past a cache growth included.
SELF_TEST = """
import os, sys
sys.path.insert(0, sys.argv[1])
os.environ["MLXLAB_CUDA_DECODE_MAX_BATCH"] = "32"  # every batch the kernels take
import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache
from inference.engine import cuda_decode, fused_projections
from native.cuda_decode import load
config = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=512, rms_norm_eps=1e-5,
              rope_theta=10000.0, tie_word_embeddings=True)
mx.random.seed(18)
model = llama.Model(llama.ModelArgs.from_dict(config))
model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
fused_projections.fuse_projections(model)
assert cuda_decode.install(model, load(sys.argv[2]))
for prompts in ([list(range(1, 255))], [[3] * 4, list(range(5, 20))],
                [[i + 1] * (3 + i % 4) for i in range(12)]):
    longest = max(map(len, prompts))
    pads = [longest - len(p) for p in prompts]
    inputs = mx.array([[0] * pad + p for pad, p in zip(pads, prompts)])
    make = (lambda: KVCache()) if len(prompts) == 1 else (lambda: BatchKVCache(pads))
    ours, theirs = [make() for _ in range(2)], [make() for _ in range(2)]
    llama.Model.__call__(model, inputs, cache=ours)
    llama.Model.__call__(model, inputs, cache=theirs)
    token = inputs[:, -1:]
    for _ in range(6):
        want = llama.Model.__call__(model, token, cache=theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        error = mx.abs(want - got).max().item() / mx.abs(want).max().item()
        assert error < 0.05, f"logits differ by {error:.3f} of their largest"
        token = mx.argmax(want[:, -1], axis=-1)[:, None]
print("checked")
"""


def fingerprint() -> str:
    """What a build depends on: a change to any of it means building again."""
    digest = hashlib.sha256()
    for path in sorted([Path(__file__), HERE / "CMakeLists.txt", *(HERE / "src").rglob("*.*")]):
        digest.update(path.name.encode() + path.read_bytes())
    for package in ("mlx", *CUDA_WHEELS, "nanobind"):
        digest.update(_version(package).encode())
    digest.update(sys.version.encode())
    digest.update(f"{_nvcc()} {os.environ.get(ARCHS_VARIABLE, 'native')}".encode())
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found is None and Path("/usr/local/cuda/bin/nvcc").exists():
        found = "/usr/local/cuda/bin/nvcc"
    return found


def why_not() -> str | None:
    """Why this machine cannot build the step, or None."""
    if all(_version(wheel) == "absent" for wheel in CUDA_WHEELS):
        return "mlx has no CUDA backend here (make setup installs it where a GPU answers)"
    if _nvcc() is None:
        return "nvcc (the CUDA compiler) is not installed"
    if shutil.which("cmake") is None:
        return "cmake is not installed"
    return None


def build() -> str | None:
    """Configure and compile into build/; None when it worked, else why not."""
    archs = os.environ.get(ARCHS_VARIABLE, "native")
    steps = (
        ["cmake", "-S", str(HERE), "-B", str(BUILD / "cmake"), f"-DPython_EXECUTABLE={sys.executable}",
         f"-DCMAKE_CUDA_COMPILER={_nvcc()}", f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
         f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={BUILD}"],
        ["cmake", "--build", str(BUILD / "cmake"), "-j2"],
    )  # fmt: skip
    with LOG.open("w") as log:
        for step in steps:
            done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                return f"`{' '.join(step[:2])}` failed (see {LOG.relative_to(HERE.parent.parent)})"
    return None


def self_test(library: Path) -> str | None:
    """Run the step against mlx-lm's model in a child; why it failed, or None."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", SELF_TEST, str(HERE.parent.parent), str(library)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return "the self-test did not finish in 600 s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return f"the self-test failed: {lines[-1]}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even if nothing changed")
    args = parser.parse_args()
    stamp = fingerprint()
    try:
        previous = json.loads(STATUS.read_text())
    except (OSError, ValueError):
        previous = {}
    if previous.get("fingerprint") == stamp and not args.force:
        return 0
    BUILD.mkdir(exist_ok=True)
    for old in BUILD.glob("_cuda_decode*.so"):
        old.unlink()
    started = time.monotonic()
    skipped = why_not()
    why = skipped or build()
    if why is None:
        library = next(BUILD.glob("_cuda_decode*.so"), None)
        why = "the build made no library" if library is None else self_test(library)
    status = {"ok": why is None, "reason": why or "built and checked against mlx-lm",
              "fingerprint": stamp, "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    STATUS.write_text(json.dumps(status, indent=1) + "\n")
    if why is not None and skipped is None:
        print(f"setup: the CUDA decode step is not used: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
