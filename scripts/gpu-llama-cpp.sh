#!/usr/bin/env bash
# llama.cpp's CUDA build on the GPU machine, as issue 53's peer: built from the source that
# llama-cpp-python's sdist vendors (packed here, without its .git, test vocabularies and
# docs: 12 MB), then llama-bench (prefill of 512, decode of 128, one stream) and
# llama-batched-bench (1 to 64 parallel sequences) on a GGUF. Output under $OUT.
#   scripts/gpu-llama-cpp.sh pack [OUT.tar.gz]       # here, with network: the packed source
#   scripts/gpu-llama-cpp.sh build SOURCE.tar.gz     # cmake + ninja: llama-bench, llama-batched-bench
#   scripts/gpu-llama-cpp.sh bench MODEL.gguf
#   scripts/gpu-llama-cpp.sh peer                    # bench on the default model's Q4_1 and on
#       the Llama-1B shape's f16 GGUF, written from bench/gpu_models.py's weights
#       (bench/gguf_llama.py; its MLX folder beside it, for bench/gpu_served.py --folder)
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

bench() {  # flash attention off and on: llama.cpp's better of the two is its figure
  "$W/build/bin/llama-bench" -m "$1" -ngl 99 -p 512 -n 128 -r 3 -fa 0,1 -o md 2>&1 | tee -a "$OUT/llama.txt"
  "$W/build/bin/llama-batched-bench" -m "$1" -ngl 99 -c 32768 -npp 32 -ntg 128 \
    -npl 1,8,32,64 2>&1 | grep -E "^\|" | tee -a "$OUT/llama.txt"
}

peer() {
  local q4 big=${LLAMA_1B_GGUF:-$HOME/llama-1b-f16.gguf}
  q4=$(.venv/bin/python -c 'from bench.llama_cpp import gguf_file; print(gguf_file())')
  [ -f "$big" ] || .venv/bin/python bench/gguf_llama.py --shape llama-1b-bf16 \
    --gguf-py "$W/gguf-py" --out "$big" 2>&1 | tee -a "$OUT/llama.txt"
  for model in "$q4" "$big"; do
    echo "== $model" | tee -a "$OUT/llama.txt"
    bench "$model"
  done
}

pack() {  # llama-cpp-python's sdist (the version bench/llama_cpp.py builds), its llama.cpp
  local into=${1:-.gpu/llama.cpp-src.tar.gz} tmp; tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp"
  tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" --exclude='*/.git/*' \
    --exclude='*/vendor/llama.cpp/models/*' --exclude='*/docs/*' --exclude='*/examples/*'
  mkdir -p "$(dirname "$into")"
  tar czf "$into" -C "$tmp"/llama_cpp_python-*/vendor llama.cpp && rm -rf "$tmp"
  ls -la "$into"
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  build) build "$2" ;;
  bench) bench "$2" ;;
  peer) peer ;;
  *) echo "usage: $0 pack [OUT] | build SOURCE.tar.gz | bench MODEL.gguf | peer" >&2; exit 2 ;;
esac
