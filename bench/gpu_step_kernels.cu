// The CUDA decode step's kernels alone: no MLX, no Python (issue 18).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o step_kernels bench/gpu_step_kernels.cu \
//        native/cuda_decode/src/kernels.cu
//   ./step_kernels [batches, default 1,8,16,32] [tensor_rows, default 3] [overlap_rows, 16]
//
// Random weights of the Llama-1B shape bench/gpu_models.py builds (bf16, 49,152-token tied
// vocabulary, 2.15 GB), the caches at column 160. Per batch: device time of a whole step
// (launch_step, 50 steps timed with CUDA events after 5), and tok/s. What the kernels take
// at a batch size is then a matter of the kernels: bench/gpu_step_kernels.sh builds
// variants of them and times each, and Nsight Compute reads this program's kernels.
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../native/cuda_decode/src/kernels.h"

namespace cd = mlxlab::cuda_decode;

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

__global__ void fill(__nv_bfloat16* out, size_t count, unsigned seed, float scale, float base) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    out[i] = __float2bfloat16(base + scale * ((h & 0xffff) / 32768.0f - 1.0f));
  }
}

void* random_bf16(size_t count, unsigned seed, float scale = 0.02f, float base = 0.0f) {
  void* p = nullptr;
  check(cudaMalloc(&p, count * 2), "cudaMalloc");
  fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), count, seed, scale, base);
  return p;
}

std::vector<int> parse(const char* text) {
  std::vector<int> values;
  std::string s(text);
  size_t at = 0;
  while (at < s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    values.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> batches = parse(argc > 1 ? argv[1] : "1,8,16,32");
  cd::Shape s{};
  s.hidden = 2048, s.heads = 32, s.kv_heads = 8, s.head_dim = 64, s.intermediate = 8192;
  s.vocab = 49152, s.capacity = 256, s.column = 160, s.half = false, s.traditional = false;
  s.eps = 1e-5f, s.attention_scale = 0.125f, s.rope_scale = 1.0f, s.log2_base = 13.2877f;
  s.tensor_rows = argc > 2 ? std::atoi(argv[2]) : 3;
  s.overlap_rows = argc > 3 ? std::atoi(argv[3]) : 16;
  int device = 0, limit = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "attr");
  s.shared_limit = limit;
  const int layers = 16, qkv_rows = (s.heads + 2 * s.kv_heads) * s.head_dim;

  cd::Pointers p{};
  p.embedding = random_bf16(static_cast<size_t>(s.vocab) * s.hidden, 1);
  p.lm_head = p.embedding;
  p.final_norm = random_bf16(s.hidden, 2, 0.1f, 1.0f);
  size_t weight_bytes = static_cast<size_t>(s.vocab) * s.hidden * 2;
  const size_t cache = static_cast<size_t>(cd::kMaxBatch) * s.kv_heads * s.capacity * s.head_dim;
  for (int l = 0; l < layers; ++l) {
    cd::Layer layer{};
    const unsigned seed = 100 + 10 * l;
    layer.input_norm = random_bf16(s.hidden, seed, 0.1f, 1.0f);
    layer.qkv = random_bf16(static_cast<size_t>(qkv_rows) * s.hidden, seed + 1);
    layer.o = random_bf16(static_cast<size_t>(s.hidden) * s.heads * s.head_dim, seed + 2);
    layer.post_norm = random_bf16(s.hidden, seed + 3, 0.1f, 1.0f);
    layer.gate_up = random_bf16(2 * static_cast<size_t>(s.intermediate) * s.hidden, seed + 4);
    layer.down = random_bf16(static_cast<size_t>(s.hidden) * s.intermediate, seed + 5);
    layer.keys = random_bf16(cache, seed + 6, 1.0f);
    layer.values = random_bf16(cache, seed + 7, 1.0f);
    weight_bytes += 2 * (static_cast<size_t>(qkv_rows) * s.hidden +
                         static_cast<size_t>(s.hidden) * s.heads * s.head_dim +
                         3 * static_cast<size_t>(s.intermediate) * s.hidden);
    p.layers.push_back(layer);
  }
  std::vector<int32_t> tokens(cd::kMaxBatch), positions(cd::kMaxBatch, s.column),
      first(cd::kMaxBatch, 0);
  for (int b = 0; b < cd::kMaxBatch; ++b) tokens[b] = (b * 7919 + 13) % s.vocab;
  int32_t* ints = nullptr;
  check(cudaMalloc(&ints, 3 * cd::kMaxBatch * sizeof(int32_t)), "cudaMalloc");
  check(cudaMemcpy(ints, tokens.data(), cd::kMaxBatch * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(ints + cd::kMaxBatch, positions.data(), cd::kMaxBatch * 4,
                   cudaMemcpyHostToDevice), "copy");  // fmt
  check(cudaMemcpy(ints + 2 * cd::kMaxBatch, first.data(), cd::kMaxBatch * 4,
                   cudaMemcpyHostToDevice), "copy");
  p.tokens = ints, p.positions = ints + cd::kMaxBatch, p.first_columns = ints + 2 * cd::kMaxBatch;
  s.batch = cd::kMaxBatch;
  check(cudaMalloc(&p.scratch, cd::scratch_bytes(s)), "cudaMalloc");
  check(cudaMalloc(&p.logits, static_cast<size_t>(cd::kMaxBatch) * s.vocab * 2), "cudaMalloc");
  check(cudaDeviceSynchronize(), "fill");

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::printf("weights %.2f GB; tensor_rows %d overlap_rows %d\n", weight_bytes / 1e9,
              s.tensor_rows, s.overlap_rows);
  for (int batch : batches) {
    s.batch = batch;
    for (int i = 0; i < 5; ++i) check(cd::launch_step(s, p, stream), "launch_step");
    check(cudaStreamSynchronize(stream), "warm-up");
    const int steps = 50;
    check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < steps; ++i) check(cd::launch_step(s, p, stream), "launch_step");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    const double step_ms = ms / steps;
    std::printf("batch %2d: %.3f ms a step, %8.0f tok/s, weights at %.2f TB/s\n", batch,
                step_ms, batch * 1000.0 / step_ms, weight_bytes / (step_ms * 1e-3) / 1e12);
  }
  return 0;
}
