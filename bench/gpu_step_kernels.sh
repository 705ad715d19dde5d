#!/usr/bin/env bash
# The CUDA decode step's kernels, variants side by side, and where one step's time goes.
#
#   bash bench/gpu_step_kernels.sh OUT [batches]    # on a machine with nvcc and an sm_90 GPU
#
# Builds bench/gpu_step_kernels.cu against native/cuda_decode's kernels once per variant
# (VARIANTS: name=nvcc flags; the tensor-core matvec's warps a block and its unrolled
# depth), runs each twice, alternated, with the matmuls through cuBLAS from each of
# GEMM_ROWS rows (99: never), then reads the default build's kernels with Nsight Compute:
# every kernel of one step at 32 rows with its duration (OUT/step_kernels.csv), and the
# 32-row tensor-core matvecs' warp stalls and memory traffic (OUT/matvec_details.txt).
set -euo pipefail
out=${1:?usage: gpu_step_kernels.sh OUT [batches]}
batches=${2:-1,8,16,32}
here=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$out"
bin=$(mktemp -d)
# e.g. VARIANTS="base= depth8=-DMLXLAB_TENSOR_DEPTH=8 warps8=-DMLXLAB_TENSOR_WARPS=8"
VARIANTS=${VARIANTS:-"base="}
GEMM_ROWS=${GEMM_ROWS:-"99 16 8 4 1"}  # from how many rows the matmuls go through cuBLAS

for variant in $VARIANTS; do
  name=${variant%%=*} flags=${variant#*=}
  # shellcheck disable=SC2086
  "$nvcc" -O3 -std=c++17 -arch=sm_90 $flags -o "$bin/step_$name" \
    "$here/bench/gpu_step_kernels.cu" "$here/native/cuda_decode/src/kernels.cu" \
    "$here"/native/cuda_decode/src/step_*.cu \
    "$here/native/cuda_decode/src/gemm.cpp" -lcublasLt &
done
wait

for round in 1 2; do
  for variant in $VARIANTS; do
    name=${variant%%=*}
    for gemm_rows in $GEMM_ROWS; do
      echo "== $name, cuBLAS from $gemm_rows rows (round $round)"
      "$bin/step_$name" "$batches" 3 16 "$gemm_rows"
    done
  done
done 2>&1 | tee "$out/variants.txt"

# One step at 32 rows is 82 launches; the fifth warm-up step starts at launch 328.
"$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --launch-skip 328 --launch-count 82 --csv "$bin/step_base" 32 3 16 99 >"$out/step_kernels.csv" 2>&1 || true
"$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --launch-skip 600 --launch-count 200 --csv "$bin/step_base" 32 >"$out/step_gemm.csv" 2>&1 || true
"$ncu" --clock-control none -k regex:tensor_matvec --launch-skip 20 --launch-count 4 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  "$bin/step_base" 32 3 16 99 >"$out/matvec_details.txt" 2>&1 || true
