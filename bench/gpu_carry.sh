#!/usr/bin/env bash
# What a run on the lent GPU machine carries besides ../shared/gpu/fetch-wheels.sh's .gpu/a
# and .gpu/b (MLX's CUDA wheels, 47 and 49 MiB), each carry under the 64 MiB a call takes:
# .gpu/c holds the built CUDA step and the first half of a model folder, .gpu/d the rest.
#
#   bench/gpu_carry.sh LIBRARY.so [MODEL_DIR]    (MODEL_DIR: var/models/smollm2-135m-instruct)
#
# Then four calls in a row, each within the 30 s a machine stays warm:
#   carry .gpu/a:  mkdir -p "$HOME/mlx-parts" && cp .gpu/a/* "$HOME/mlx-parts/"
#   carry .gpu/b:  bash .gpu/b/install-on-device.sh
#   carry .gpu/c:  cp .gpu/c/* "$HOME/mlx-parts/"
#   carry .gpu/d:  source bench/gpu_carry.sh --unpack && python3 bench/gpu.py --out "$OUT" \
#                  --tokenizer "$MODEL_DIR" --model-dirs "$MODEL_DIR" ...
# --unpack (on the device) puts the model under $HOME/models and exports
# MLXLAB_CUDA_DECODE_LIBRARY and MODEL_DIR.
set -euo pipefail

if [[ "${1:-}" == "--unpack" ]]; then
  mkdir -p "$HOME/models"
  cat "$HOME"/mlx-parts/model.part.* .gpu/d/model.part.* | tar x -C "$HOME/models"
  export MLXLAB_CUDA_DECODE_LIBRARY="$HOME/mlx-parts/$(cat .gpu/d/library-name)"
  export MODEL_DIR="$HOME/models/$(cat .gpu/d/model-name)"
  set +euo pipefail  # sourced: leave the caller's shell as it was
  return 0 2>/dev/null || exit 0
fi

library=${1:?the built _cuda_decode library}
model=${2:-var/models/smollm2-135m-instruct}
rm -rf .gpu/c .gpu/d && mkdir -p .gpu/c .gpu/d
cp "$library" .gpu/c/
basename "$library" > .gpu/d/library-name
basename "$model" > .gpu/d/model-name
tar c -C "$(dirname "$model")" "$(basename "$model")" | split -b 48m - .gpu/model.part.
mv .gpu/model.part.aa .gpu/c/
mv .gpu/model.part.a[b-z] .gpu/d/
du -sh .gpu/c .gpu/d
