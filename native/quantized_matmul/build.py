"""Build the quantized matmul extension and check it against MLX; `make setup` runs this.

    .venv/bin/python native/quantized_matmul/build.py [--force]

Quiet when nothing changed since the last build (the sources, mlx, nanobind, Python,
the compiler). A failed build or self-test never fails setup: the engine then keeps
the dense float32 path, and `build/status.json` says why (shown in /stats).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
STATUS = BUILD / "status.json"
LOG = BUILD / "build.log"

# Every shape class the engine sends: bits 4 and 8, each group size, odd sizes, decode
# rows (1-8) and prefill rows (the sgemm path when OpenBLAS is loaded).
SELF_TEST = """
import sys
sys.path.insert(0, sys.argv[1])
import inference.engine  # loads OpenBLAS as the engine does, so the sgemm path is checked too
import mlx.core as mx
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
    """What a build depends on: a change to any of it means building again."""
    digest = hashlib.sha256()
    for path in sorted([Path(__file__), HERE / "CMakeLists.txt", *(HERE / "src").glob("*")]):
        digest.update(path.name.encode() + path.read_bytes())
    for package in ("mlx", "nanobind"):
        digest.update(_version(package).encode())
    digest.update(sys.version.encode())
    for tool in ("cmake", "c++", "g++", "gcc"):
        digest.update(str(shutil.which(tool)).encode())
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def build() -> str | None:
    """Configure and compile into build/; None when it worked, else why not."""
    if shutil.which("cmake") is None:
        return "cmake is not installed (apt-get install cmake g++)"
    if _version("nanobind") == "absent":
        return "nanobind is not installed (pip install nanobind)"
    steps = (
        ["cmake", "-S", str(HERE), "-B", str(BUILD / "cmake"), f"-DPython_EXECUTABLE={sys.executable}",
         f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={BUILD}"],
        ["cmake", "--build", str(BUILD / "cmake"), "-j2"],
    )  # fmt: skip
    with LOG.open("w") as log:
        for step in steps:
            done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                return f"`{' '.join(step[:2])}` failed (see {LOG.relative_to(HERE.parent.parent)})"
    return None


def self_test(library: Path) -> tuple[str | None, str]:
    """Run the kernel against mx.quantized_matmul in a child; (why it failed, kernel name)."""
    root = str(HERE.parent.parent)
    try:
        done = subprocess.run(
            [sys.executable, "-c", SELF_TEST, root, str(library)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        return "the self-test did not finish in 300 s", ""
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return f"the self-test failed: {lines[-1]}", ""
    return None, done.stdout.strip()


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
    for old in BUILD.glob("_qmm*.so"):
        old.unlink()
    started = time.monotonic()
    why = build()
    kernel = ""
    if why is None:
        library = next(BUILD.glob("_qmm*.so"), None)
        why = "the build made no library" if library is None else None
        if library is not None:
            why, kernel = self_test(library)
    status = {"ok": why is None, "reason": why or f"built and checked ({kernel} kernel)",
              "fingerprint": stamp, "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    STATUS.write_text(json.dumps(status, indent=1) + "\n")
    if why is not None:
        print(f"setup: the quantized matmul kernel is not used: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
