#!/usr/bin/env bash
# llama.cpp's CUDA build on the GPU machine, as issue 53's peer: built from the source that
# llama-cpp-python's sdist vendors (packed here, without its .git, test vocabularies and
# docs: 12 MB), then llama-bench (prefill of 512, decode of 128, one stream) and
# llama-batched-bench (1 to 64 parallel sequences) on a GGUF. Output under $OUT.
#   scripts/gpu-llama-cpp.sh build SOURCE.tar.gz     # cmake + ninja: llama-bench, llama-batched-bench
#   scripts/gpu-llama-cpp.sh bench MODEL.gguf
set -euo pipefail
W=${LLAMA_CPP_DIR:-$HOME/llama.cpp}
OUT=${OUT:-var/gpu-run}
mkdir -p "$OUT"

build() {
  mkdir -p "$W" && tar xzf "$1" -C "$W" --strip-components=1
  local t=$(date +%s)
  # One architecture (the card's), no UI assets (they come from the network), no tests.
  cmake -S "$W" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=native -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    > "$OUT/llama-cmake.log" 2>&1
  cmake --build "$W/build" --target llama-bench llama-batched-bench -j "$(nproc)" \
    > "$OUT/llama-build.log" 2>&1
  echo "llama.cpp built in $(( $(date +%s) - t )) s" | tee -a "$OUT/llama.txt"
}

bench() {
  "$W/build/bin/llama-bench" -m "$1" -ngl 99 -p 512 -n 128 -r 3 -o md 2>&1 | tee -a "$OUT/llama.txt"
  "$W/build/bin/llama-batched-bench" -m "$1" -ngl 99 -c 32768 -npp 32 -ntg 128 \
    -npl 1,8,32,64 2>&1 | grep -E "^\|" | tee -a "$OUT/llama.txt"
}

case "${1:-}" in
  build) build "$2" ;;
  bench) bench "$2" ;;
  *) echo "usage: $0 build SOURCE.tar.gz | bench MODEL.gguf" >&2; exit 2 ;;
esac
