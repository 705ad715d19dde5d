"""The CPU fast path: an optimized BLAS under MLX, and dense float32 weights.

MLX's Linux CPU wheel runs quantized matmul in scalar code and links the
reference BLAS. An OpenBLAS loaded with RTLD_GLOBAL before `mlx.core` is
imported interposes its `cblas_sgemm`, so float32 matmuls become ~40x faster;
dequantizing the weights at load then moves every matmul onto it.

This module imports no MLX at import time: `load_blas` must run first.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labsettings import engine_settings

log = logging.getLogger(__name__)

# Debian's libopenblas0-pthread, then generic system names.
SYSTEM_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)

# A 64x64 sgemm reaches the vectorized kernels that a build for the wrong CPU
# dies in (cmeel-openblas: AVX-512 only, "Illegal instruction").
PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
n = 64
a = (ctypes.c_float * (n * n))(*([1.0] * (n * n)))
b = (ctypes.c_float * (n * n))(*([2.0] * (n * n)))
c = (ctypes.c_float * (n * n))()
lib.cblas_sgemm(101, 111, 111, n, n, n, ctypes.c_float(1.0), a, n, b, n, ctypes.c_float(0.0), c, n)
assert all(v == 2.0 * n for v in c), "wrong sgemm result"
"""


@dataclass(frozen=True)
class BlasState:
    """Whether an optimized BLAS sits under MLX in this process, and why (not)."""

    loaded: bool
    path: str | None
    reason: str


_state: BlasState | None = None


def blas_state() -> BlasState:
    return _state or BlasState(False, None, "no BLAS was loaded (load_blas never ran)")


def blas_candidates(explicit: str | None = None) -> list[str]:
    """Where to look for an OpenBLAS with standard cblas symbols, best first."""
    if explicit:
        return [explicit]
    wheel = Path(sysconfig.get_paths()["purelib"]) / "ngsolve_openblas"
    found = sorted(glob.glob(str(wheel / "libopenblas*.so*")))
    return found + [path for path in SYSTEM_CANDIDATES if os.path.exists(path)]


def _gfortran_stand_in() -> str | None:
    """A wheel's renamed libgfortran, for a BLAS that needs libgfortran.so.5 missing here.

    ngsolve-openblas links libgfortran.so.5 and finds it through RPATH $ORIGIN;
    mlx[cpu] itself ships one (renamed by auditwheel) which serves as well.
    """
    purelib = sysconfig.get_paths()["purelib"]
    for path in sorted(glob.glob(os.path.join(purelib, "*.libs", "libgfortran-*.so.5*"))):
        return path
    return None


def _with_companions(path: str, folder: str) -> str:
    """Link the BLAS beside its missing libgfortran in a private folder; $ORIGIN finds it.

    The linker resolves a library by the name it was loaded as, so a renamed
    copy must appear under its plain name next to the BLAS. Its own renamed
    dependencies (libquadmath-*) are linked beside it too.
    """
    stand_in = _gfortran_stand_in()
    if stand_in is None or _system_has("libgfortran.so.5"):
        return path
    linked = os.path.join(folder, os.path.basename(path))
    os.symlink(path, linked)
    os.symlink(stand_in, os.path.join(folder, "libgfortran.so.5"))
    for sibling in glob.glob(os.path.join(os.path.dirname(stand_in), "libquadmath-*.so*")):
        os.symlink(sibling, os.path.join(folder, os.path.basename(sibling)))
    return linked


def _system_has(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def probe_blas(path: str, *, timeout: float = 60.0) -> str | None:
    """Load `path` and run one sgemm in a child process; None if it works, else why not.

    A BLAS built for another CPU kills its process, so it must never be
    tried in the server first.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, path],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        return f"the probe did not finish in {timeout:.0f} s"
    if done.returncode < 0:
        return f"the probe was killed by signal {-done.returncode}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        return f"the probe failed: {lines[-1]}"
    return None


def load_blas(*, enabled: bool = True, path: str | None = None, threads: int = 1) -> BlasState:
    """Probe candidates and load the first good one globally; once per process.

    Must run before `mlx.core` is first imported: MLX binds its BLAS symbols then.
    """
    global _state
    if _state is not None:
        return _state
    if not enabled:
        _state = BlasState(False, None, "the CPU fast path is turned off (MLXLAB_CPU_FAST_PATH=0)")
    elif not sys.platform.startswith("linux"):
        _state = BlasState(False, None, "MLX uses its own BLAS (Accelerate) off Linux")
    elif "mlx.core" in sys.modules:
        _state = BlasState(False, None, "mlx.core was imported before the BLAS could be loaded")
    else:
        _state = _load_first_good(blas_candidates(path), threads)
    # The one line that says why the fast path is off, when it is; a loaded BLAS is
    # reported by /engine, so every management command need not say so.
    failed = logging.WARNING if enabled else logging.INFO
    level = logging.DEBUG if _state.loaded else failed
    log.log(level, "BLAS: %s", _state.reason)
    return _state


def _load_first_good(candidates: list[str], threads: int) -> BlasState:
    if not candidates:
        return BlasState(False, None, "no OpenBLAS found (pip install ngsolve-openblas)")
    reasons = []
    folder = tempfile.mkdtemp(prefix="mlxlab-blas-")  # private (0700), removed below
    try:
        for index, candidate in enumerate(candidates):
            os.mkdir(subfolder := os.path.join(folder, str(index)))
            target = _with_companions(candidate, subfolder)
            if (why := probe_blas(target)) is not None:
                reasons.append(f"{candidate}: {why}")
                continue
            library = ctypes.CDLL(target, mode=ctypes.RTLD_GLOBAL)
            if hasattr(library, "openblas_set_num_threads"):
                library.openblas_set_num_threads(max(threads, 1))
            return BlasState(True, candidate, f"OpenBLAS loaded from {candidate}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # a loaded library stays mapped
    return BlasState(False, None, "no usable OpenBLAS: " + "; ".join(reasons))


def load_blas_from_environment() -> BlasState:
    """`load_blas` as the settings say (cpu_fast_path, blas_path, blas_threads).

    Read by `engine_settings`, from the environment: this runs before anything imports
    MLX, and in processes (the engine's) that have no Django settings.
    """
    return load_blas(
        enabled=engine_settings.cpu_fast_path,
        path=engine_settings.blas_path,
        threads=engine_settings.blas_threads,
    )
