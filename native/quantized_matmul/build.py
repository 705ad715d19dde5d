"""Build the quantized matmul extension and check it against MLX; `make setup` runs this.

    .venv/bin/python native/quantized_matmul/build.py [--force]

Quiet when nothing changed since the last build (the sources, mlx, nanobind, Python,
the compiler). A failed build or self-test never fails setup: the engine then keeps
the dense float32 path, and `build/status.json` says why (shown in /stats).
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

from native import extension  # noqa: E402

# Every shape class the engine sends: bits 4 and 8, each group size, odd sizes, decode
# rows (1-8) and prefill rows (the sgemm path when OpenBLAS is loaded).
SELF_TEST = """
import sys
sys.path.insert(0, sys.argv[1])
from inference.engine.process.startup import prepare_mlx_process
prepare_mlx_process()  # OpenBLAS as the engine loads it, so the sgemm path is checked too
import mlx.core as mx
mx.set_default_device(mx.cpu)  # a CPU kernel: on MLX's CUDA build too (it failed on the GPU)
from native.quantized_matmul import load
kernel = load(sys.argv[2])
mx.random.seed(21)
for bits in (4, 8):
    for group_size in (32, 64, 128):
        for rows, columns, depth in ((1, 7, 256), (3, 33, 384), (8, 130, 512), (37, 65, 256)):
            if depth % group_size:
                continue
            w, scales, biases = mx.quantize(
                mx.random.normal((columns, depth)), group_size=group_size, bits=bits
            )
            x = mx.random.normal((rows, depth))
            want = mx.quantized_matmul(
                x, w, scales, biases, transpose=True, group_size=group_size, bits=bits
            )
            got = kernel.quantized_matmul(x, w, scales, biases, group_size, bits)
            error = mx.abs(got - want).max().item()
            limit = 1e-4 * (1.0 + mx.abs(want).max().item())
            assert error <= limit, f"bits {bits}, group {group_size}, {rows}x{columns}x{depth}: {error}"
print(kernel.kernel_name())
"""


def fingerprint() -> str:
    """What a build depends on, with the C++ compilers this machine has."""
    tools = [str(shutil.which(tool)) for tool in ("cmake", "c++", "g++", "gcc")]
    return extension.fingerprint(HERE, Path(__file__), ("mlx", "nanobind"), *tools)


def build() -> str | None:
    """Configure and compile into build/; None when it worked, else why not."""
    if shutil.which("cmake") is None:
        return "cmake is not installed (apt-get install cmake g++)"
    if extension.version("nanobind") == "absent":
        return "nanobind is not installed (pip install nanobind)"
    return extension.cmake(HERE, BUILD, LOG, ROOT)


def self_test(library: Path) -> tuple[str | None, str]:
    """Run the kernel against mx.quantized_matmul in a child; (why it failed, its name)."""
    why, kernel = extension.self_test(SELF_TEST, [str(ROOT), str(library)], timeout=300)
    return why, f" ({kernel} kernel)"


if __name__ == "__main__":
    sys.exit(
        extension.build_once(
            __doc__.splitlines()[0],
            BUILD,
            "_qmm*.so",
            fingerprint(),
            build,
            self_test,
            "the quantized matmul kernel",
        )  # fmt: skip
    )
