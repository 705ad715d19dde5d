// The CUDA decode step's kernels alone: no MLX, no Python.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o step_kernels bench/gpu_step_kernels.cu \
//        native/cuda_decode/src/kernels.cu native/cuda_decode/src/step_*.cu \
//        native/cuda_decode/src/gemm.cpp -lcublasLt
//   [SHAPE=llama-1b|llama-3.2-1b|qwen3-0.6b] [LAYERS=n] [LOGITS=file] \
//   ./step_kernels [batches, default 1,8,16,32] [tensor_rows, default 3] [overlap_rows, 16]
//                  [gemm_rows, 16]
//
// Random bf16 weights of a model's shape (SHAPE; llama-1b: the one bench/gpu_models.py
// builds, a 49,152-token tied vocabulary, 2.15 GB), the caches at column 160; LAYERS
// overrides the layer count (0: the embedding and lm_head alone). Per batch: device time of a
// whole step launched kernel by kernel and replayed as one CUDA graph (as the engine's kept
// graph runs it), 50 steps timed with CUDA events after 5, and tok/s; from gemm_rows rows,
// also how far the cuBLAS path's logits are from the step's own kernels' on the same input.
// LOGITS writes the first batch's logits (float32, row after row) for comparing two builds.
// What the kernels take at a batch size is then a matter of the kernels:
// bench/gpu_step_kernels.sh builds variants of them and times each, and Nsight Compute
// reads this program's kernels.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
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

// A plain (unquantized) matrix of the step.
cd::Matrix plain(void* weight) {
  cd::Matrix m;
  m.weight = weight;
  return m;
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

std::vector<float> logits(const cd::Shape& s, const cd::Pointers& p, cudaStream_t stream) {
  check(cd::launch_step(s, p, stream), "launch_step");
  std::vector<__nv_bfloat16> raw(static_cast<size_t>(s.batch) * s.vocab);
  check(cudaMemcpyAsync(raw.data(), p.logits, raw.size() * 2, cudaMemcpyDeviceToHost, stream),
        "copy");
  check(cudaStreamSynchronize(stream), "sync");
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

// The cuBLAS path's logits against the step's own kernels' on the same tokens and caches
// (each step rewrites the same cache column with the same values): the largest difference
// as a share of the row's largest logit, and rows whose argmax differs.
void compare(cd::Shape s, const cd::Pointers& p, cudaStream_t stream) {
  const std::vector<float> gemm = logits(s, p, stream);
  s.gemm_rows = 1 << 30;
  const std::vector<float> own = logits(s, p, stream);
  double worst = 0;
  int differ = 0;
  for (int b = 0; b < s.batch; ++b) {
    const float* g = gemm.data() + static_cast<size_t>(b) * s.vocab;
    const float* o = own.data() + static_cast<size_t>(b) * s.vocab;
    float top = 0, diff = 0;
    int best_g = 0, best_o = 0;
    for (int v = 0; v < s.vocab; ++v) {
      top = std::max(top, std::fabs(o[v]));
      diff = std::max(diff, std::fabs(g[v] - o[v]));
      if (g[v] > g[best_g]) best_g = v;
      if (o[v] > o[best_o]) best_o = v;
    }
    worst = std::max(worst, static_cast<double>(diff / top));
    differ += best_g != best_o;
  }
  std::printf("  cuBLAS path against the step's kernels: largest difference %.4f of the top "
              "logit, argmax differs in %d of %d rows\n", worst, differ, s.batch);
}

// A model's shape: the fields of cd::Shape it sets, and its layers.
struct Model {
  const char* name;
  int hidden, heads, kv_heads, head_dim, intermediate, vocab, layers;
  float eps, rope_base, qk_eps;
};

const Model kModels[] = {
    {"llama-1b", 2048, 32, 8, 64, 8192, 49152, 16, 1e-5f, 10000.0f, 0.0f},
    {"llama-3.2-1b", 2048, 32, 8, 64, 8192, 128256, 16, 1e-5f, 500000.0f, 0.0f},
    {"qwen3-0.6b", 1024, 16, 8, 128, 3072, 151936, 28, 1e-6f, 1000000.0f, 1e-6f},
};

const Model& chosen() {
  const char* name = std::getenv("SHAPE");
  for (const Model& m : kModels) {
    if (name == nullptr || std::string(name) == m.name) return m;
  }
  std::fprintf(stderr, "SHAPE: llama-1b, llama-3.2-1b or qwen3-0.6b\n");
  std::exit(2);
}

// Device time of one step, `steps` of them after 5: launched kernel by kernel, or replayed
// from one CUDA graph.
double step_ms(const cd::Shape& s, const cd::Pointers& p, cudaStream_t stream, bool graph) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t captured = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    check(cd::launch_step(s, p, stream), "launch_step");
    check(cudaStreamEndCapture(stream, &captured), "capture");
    check(cudaGraphInstantiate(&exec, captured, 0), "instantiate");
    cudaGraphDestroy(captured);
  }
  auto one = [&] {
    check(graph ? cudaGraphLaunch(exec, stream) : cd::launch_step(s, p, stream), "step");
  };
  for (int i = 0; i < 5; ++i) one();
  check(cudaStreamSynchronize(stream), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  const int steps = 50;
  check(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < steps; ++i) one();
  check(cudaEventRecord(stop, stream), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  return ms / steps;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> batches = parse(argc > 1 ? argv[1] : "1,8,16,32");
  const Model& model = chosen();
  cd::Shape s{};
  s.hidden = model.hidden, s.heads = model.heads, s.kv_heads = model.kv_heads;
  s.head_dim = model.head_dim, s.intermediate = model.intermediate, s.vocab = model.vocab;
  s.capacity = 256, s.column = 160, s.half = false, s.traditional = false;
  s.eps = model.eps, s.attention_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  s.rope_scale = 1.0f, s.log2_base = std::log2(model.rope_base), s.qk_eps = model.qk_eps;
  s.tensor_rows = argc > 2 ? std::atoi(argv[2]) : 3;
  s.overlap_rows = argc > 3 ? std::atoi(argv[3]) : 16;
  s.gemm_rows = argc > 4 ? std::atoi(argv[4]) : 16;
  int device = 0, limit = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "attr");
  s.shared_limit = limit;
  const int layers = std::getenv("LAYERS") ? std::atoi(std::getenv("LAYERS")) : model.layers;
  const int qkv_rows = (s.heads + 2 * s.kv_heads) * s.head_dim;

  cd::Pointers p{};
  p.embedding = plain(random_bf16(static_cast<size_t>(s.vocab) * s.hidden, 1));
  p.lm_head = p.embedding;
  p.final_norm = random_bf16(s.hidden, 2, 0.1f, 1.0f);
  size_t weight_bytes = static_cast<size_t>(s.vocab) * s.hidden * 2;
  const int most = cd::kMaxGemmBatch;
  const size_t cache = static_cast<size_t>(most) * s.kv_heads * s.capacity * s.head_dim;
  for (int l = 0; l < layers; ++l) {
    cd::Layer layer{};
    const unsigned seed = 100 + 10 * l;
    layer.input_norm = random_bf16(s.hidden, seed, 0.1f, 1.0f);
    layer.qkv = plain(random_bf16(static_cast<size_t>(qkv_rows) * s.hidden, seed + 1));
    layer.o = plain(random_bf16(static_cast<size_t>(s.hidden) * s.heads * s.head_dim, seed + 2));
    layer.post_norm = random_bf16(s.hidden, seed + 3, 0.1f, 1.0f);
    const size_t wide = 2 * static_cast<size_t>(s.intermediate) * s.hidden;
    layer.gate_up = plain(random_bf16(wide, seed + 4));
    layer.down = plain(random_bf16(static_cast<size_t>(s.hidden) * s.intermediate, seed + 5));
    layer.keys = random_bf16(cache, seed + 6, 1.0f);
    layer.values = random_bf16(cache, seed + 7, 1.0f);
    if (s.qk_eps > 0.0f) {
      layer.q_norm = random_bf16(s.head_dim, seed + 8, 0.1f, 1.0f);
      layer.k_norm = random_bf16(s.head_dim, seed + 9, 0.1f, 1.0f);
    }
    weight_bytes += 2 * (static_cast<size_t>(qkv_rows) * s.hidden +
                         static_cast<size_t>(s.hidden) * s.heads * s.head_dim +
                         3 * static_cast<size_t>(s.intermediate) * s.hidden);
    p.layers.push_back(layer);
  }
  std::vector<int32_t> tokens(most), positions(most, s.column), first(most, 0);
  for (int b = 0; b < most; ++b) tokens[b] = (b * 7919 + 13) % s.vocab;
  int32_t* ints = nullptr;
  check(cudaMalloc(&ints, 3 * most * sizeof(int32_t)), "cudaMalloc");
  check(cudaMemcpy(ints, tokens.data(), most * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(ints + most, positions.data(), most * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(ints + 2 * most, first.data(), most * 4, cudaMemcpyHostToDevice), "copy");
  p.tokens = ints, p.positions = ints + most, p.first_columns = ints + 2 * most;
  s.batch = most;
  check(cudaMalloc(&p.scratch, cd::scratch_bytes(s)), "cudaMalloc");
  check(cudaMalloc(&p.logits, static_cast<size_t>(most) * s.vocab * 2), "cudaMalloc");
  check(cudaDeviceSynchronize(), "fill");

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  std::printf("%s, %d layers: weights %.3f GB; tensor_rows %d overlap_rows %d gemm_rows %d\n",
              model.name, layers, weight_bytes / 1e9, s.tensor_rows, s.overlap_rows,
              s.gemm_rows);
  const char* dump = std::getenv("LOGITS");
  for (int batch : batches) {
    s.batch = batch;
    if (!cd::fits(s)) {
      std::printf("batch %2d: more rows than these kernels take\n", batch);
      continue;
    }
    const double launched = step_ms(s, p, stream, false);
    const double replayed = batch < s.gemm_rows ? step_ms(s, p, stream, true) : launched;
    std::printf("batch %2d: %.4f ms a step launched, %.4f replayed: %8.0f tok/s, weights at "
                "%.2f TB/s\n", batch, launched, replayed, batch * 1000.0 / replayed,
                weight_bytes / (replayed * 1e-3) / 1e12);
    if (batch >= s.gemm_rows && batch <= cd::kMaxBatch) compare(s, p, stream);
    if (dump != nullptr) {
      const std::vector<float> out = logits(s, p, stream);
      FILE* f = std::fopen(dump, "wb");
      std::fwrite(out.data(), sizeof(float), out.size(), f);
      std::fclose(f);
      dump = nullptr;
    }
  }
  return 0;
}
