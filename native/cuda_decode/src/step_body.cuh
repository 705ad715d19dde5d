// The step's kernels and their launches, each (dtype, head width) instantiated in a file of
// its own (step_*.cu) so that the build compiles them in parallel; kernels.cu dispatches.
//
// Each kernel rounds to the model's dtype where mlx-lm's operations round (the norm's scaled
// input, every matmul's output, RoPE, SwiGLU's steps, the residual adds), so the step
// computes what mlx-lm's Llama computes up to the order of float sums.
#pragma once

#include "kernels.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "attend.cuh"
#include "gemm.h"
#include "quantized_matvec.cuh"
#include "row_kernels.cuh"
#include "tensor_matvec.cuh"
#include "tensor_quantized_matvec.cuh"

namespace mlxlab::cuda_decode {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kUnasked = 48 * 1024 - 2048;  // shared memory a block gets unasked
constexpr size_t kStaticShared = 4096;  // above the staged input: the norm's partial sums

size_t aligned(size_t bytes, size_t to = kAlign) { return (bytes + to - 1) / to * to; }

// How many blocks of `Kernel` the GPU holds at once with `shared` bytes each (at least one
// an SM): a grid of more would only run in waves.
template <auto Kernel>
int resident_blocks(size_t shared, int threads = kThreads) {
  static std::mutex lock;
  static std::map<size_t, int> known;  // by shared bytes
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count;
  }();
  std::lock_guard<std::mutex> guard(lock);
  auto found = known.find(shared);
  if (found != known.end()) return found->second;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, shared) !=
      cudaSuccess) {
    per_sm = 1;
  }
  return known[shared] = sms * std::max(per_sm, 1);
}

// Above what a block gets unasked, raise `Kernel`'s limit once, to the most a block may have
// (fits() kept the step's shared memory under it).
template <auto Kernel>
void allow_shared(size_t shared) {
  if (shared <= kUnasked) return;
  static const cudaError_t raised = [] {
    int device = 0, most = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    return cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                most - static_cast<int>(kStaticShared));
  }();
  (void)raised;
}

// Launch `kernel`; with `overlap`, as a programmatic dependent launch (device_math.cuh).
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 blocks, int threads, size_t shared,
                   cudaStream_t stream, bool overlap, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = blocks;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// Whether this step's kernels overlap their neighbours: on an H200 that gained 4-13% up to 8
// rows and lost up to 22% at 16 (docs/BENCHMARKS.md).
bool overlap(const Shape& s) { return s.batch < s.overlap_rows; }

// The kernels' template batch for `batch` rows.
int bucket(int batch) {
  int b = 1;
  while (b < batch) b *= 2;
  return b;
}

struct Scratch {
  void* x;  // the residual stream (batch, hidden)
  void* qkv;  // (batch, (heads + 2 kv_heads) head_dim)
  void* attention;  // (batch, heads head_dim)
  void* act;  // (batch, intermediate)
  // The cuBLAS path's (gemm.h) own: the normed input of a matmul, a residual matmul's output
  // before its add, and the gate/up matmul's output before SwiGLU.
  void* normed;  // (batch, hidden)
  void* out;  // (batch, hidden)
  void* wide;  // (batch, 2 intermediate)
};

Scratch carve(const Shape& s, void* base) {
  const size_t e = s.half ? sizeof(__half) : sizeof(__nv_bfloat16);
  char* p = static_cast<char*>(base);
  Scratch out;
  out.x = p;
  p += aligned(e * s.batch * s.hidden);
  out.qkv = p;
  p += aligned(e * s.batch * (s.heads + 2 * s.kv_heads) * s.head_dim);
  out.attention = p;
  p += aligned(e * s.batch * s.heads * s.head_dim);
  out.act = p;
  p += aligned(e * s.batch * s.intermediate);
  out.normed = p;
  p += aligned(e * s.batch * s.hidden);
  out.out = p;
  p += aligned(e * s.batch * s.hidden);
  out.wide = p;
  return out;
}

// The residual matvecs' input is staged in shared memory where it fits unasked (a warp
// read all of it from L2 for every two rows); the normed ones' always is.
template <typename T, bool NORM>
size_t staged_input(const Shape& s, int depth, bool* stage) {
  const size_t input = sizeof(T) * s.batch * depth;
  *stage = !NORM && input <= kUnasked;
  return NORM || *stage ? input : 0;
}

// How many warps a tensor-core tile takes (each over every splits-th round of columns): enough
// to give every resident warp work, since the o and down matrices have only hidden / 16 tiles.
template <auto Kernel>
dim3 tensor_grid(int tiles, size_t shared, int* splits) {
  const int resident = resident_blocks<Kernel>(shared, kTensorThreads);
  *splits = 1;
  while (*splits < kTensorWarps && tiles * *splits < resident * kTensorWarps) *splits *= 2;
  const int per_block = kTensorWarps / *splits;
  return dim3(std::min((tiles + per_block - 1) / per_block, resident));
}

// A tensor-core matvec (tensor_matvec.cuh, tensor_quantized_matvec.cuh): its staged input and
// the warps' partial sums in shared memory, tensor_grid's warps a tile; `args` are the
// kernel's own before n_out, depth, batch and splits.
template <auto Kernel, typename T, int B, int MODE, bool NORM, typename... Args>
cudaError_t launch_tensor(const Shape& s, cudaStream_t stream, int n_out, int depth,
                          Args... args) {
  const size_t staged = NORM ? sizeof(T) * s.batch * staged_pitch(depth) : 0;
  const size_t shared = staged + tensor_partials_bytes(B);
  allow_shared<Kernel>(shared);
  int splits = 1;
  const dim3 blocks = tensor_grid<Kernel>(tile_count<MODE>(n_out), shared, &splits);
  return launch(Kernel, blocks, kTensorThreads, shared, stream, overlap(s), args..., n_out, depth,
                s.batch, splits);
}

// A quantized matvec: on tensor cores from `tensor_rows` rows a batch
// (tensor_quantized_matvec.cuh; its batch template at least 8, one mma tile), else on CUDA
// cores (quantized_matvec.cuh).
template <typename T, int B, int MODE, bool NORM, int BITS, int GROUP>
cudaError_t launch_quantized(const Shape& s, cudaStream_t stream, const Matrix& m, const void* x,
                             const void* norm, void* out, int n_out, int depth) {
  const auto* packed = static_cast<const uint32_t*>(m.weight);
  const T* scales = static_cast<const T*>(m.scales);
  const T* biases = static_cast<const T*>(m.biases);
  if (s.batch >= s.tensor_rows) {
    constexpr auto kernel = tensor_quantized_matvec<T, (B < 8 ? 8 : B), MODE, NORM, BITS, GROUP>;
    return launch_tensor<kernel, T, B, MODE, NORM>(s, stream, n_out, depth, packed, scales, biases,
                                                   static_cast<const T*>(x),
                                                   static_cast<const T*>(norm), s.eps,
                                                   static_cast<T*>(out));
  }
  constexpr auto kernel = quantized_matvec<T, B, MODE, NORM, BITS, GROUP>;
  bool stage = false;
  const size_t staged = staged_input<T, NORM>(s, depth, &stage);
  allow_shared<kernel>(staged);
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  const int blocks = std::min((units + kWarps - 1) / kWarps, resident_blocks<kernel>(staged));
  return launch(kernel, dim3(blocks), kThreads, staged, stream, overlap(s), packed, scales,
                biases, static_cast<const T*>(x), static_cast<const T*>(norm), s.eps,
                static_cast<T*>(out), n_out, depth, s.batch, stage);
}

// One matvec of the step: a quantized matrix's, or a plain one's on tensor cores from
// `tensor_rows` rows a batch, else on CUDA cores (matvec.cuh).
template <typename T, int B, int MODE, bool NORM>
cudaError_t launch_matvec(const Shape& s, cudaStream_t stream, const Matrix& m, const void* x,
                          const void* norm, void* out, int n_out, int depth) {
  if (m.bits == 4 && m.group == 32) {
    return launch_quantized<T, B, MODE, NORM, 4, 32>(s, stream, m, x, norm, out, n_out, depth);
  }
  if (m.bits == 4 && m.group == 64) {
    return launch_quantized<T, B, MODE, NORM, 4, 64>(s, stream, m, x, norm, out, n_out, depth);
  }
  if (m.bits == 8 && m.group == 32) {
    return launch_quantized<T, B, MODE, NORM, 8, 32>(s, stream, m, x, norm, out, n_out, depth);
  }
  if (m.bits == 8 && m.group == 64) {
    return launch_quantized<T, B, MODE, NORM, 8, 64>(s, stream, m, x, norm, out, n_out, depth);
  }
  if (m.bits != 0) return cudaErrorInvalidValue;
  const T* weights = static_cast<const T*>(m.weight);
  const T* in = static_cast<const T*>(x);
  const T* norm_weight = static_cast<const T*>(norm);
  T* result = static_cast<T*>(out);
  if (s.batch >= s.tensor_rows && depth % 32 == 0) {
    return launch_tensor<tensor_matvec<T, B, MODE, NORM>, T, B, MODE, NORM>(
        s, stream, n_out, depth, weights, in, norm_weight, s.eps, result);
  }
  constexpr auto kernel = matvec<T, B, MODE, NORM>;
  bool stage = false;
  const size_t staged = staged_input<T, NORM>(s, depth, &stage);
  allow_shared<kernel>(staged);
  // A few blocks an SM, each warp taking every (grid)th unit of two rows.
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  const int blocks = std::min((units + kWarps - 1) / kWarps, resident_blocks<kernel>(staged));
  return launch(kernel, dim3(blocks), kThreads, staged, stream, overlap(s), weights, in,
                norm_weight, s.eps, result, n_out, depth, s.batch, stage);
}


// The tokens' embedding rows into x: the first kernel, which waits for all that came before
// it on the stream (MLX's work).
template <typename T>
cudaError_t launch_embed(const Shape& s, const Pointers& p, void* x, cudaStream_t stream) {
  const Matrix& m = p.embedding;
  const dim3 blocks(s.batch);
  T* to = static_cast<T*>(x);
  if (m.bits == 0) {
    return launch(embed<T>, blocks, kThreads, 0, stream, false, static_cast<const T*>(m.weight),
                  p.tokens, to, s.hidden);
  }
  const auto* table = static_cast<const uint32_t*>(m.weight);
  const auto* scales = static_cast<const T*>(m.scales);
  const auto* biases = static_cast<const T*>(m.biases);
  auto quantized = [&](auto kernel) {
    return launch(kernel, blocks, kThreads, 0, stream, false, table, scales, biases, p.tokens,
                  to, s.hidden);
  };
  if (m.bits == 4 && m.group == 32) return quantized(quantized_embed<T, 4, 32>);
  if (m.bits == 4 && m.group == 64) return quantized(quantized_embed<T, 4, 64>);
  if (m.bits == 8 && m.group == 32) return quantized(quantized_embed<T, 8, 32>);
  if (m.bits == 8 && m.group == 64) return quantized(quantized_embed<T, 8, 64>);
  return cudaErrorInvalidValue;
}

AttentionArgs attention_args(const Shape& s, const Pointers& p) {
  AttentionArgs a{};
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.capacity = s.capacity;
  a.column = s.column;
  a.column_at = p.column_at;
  a.traditional = s.traditional;
  a.scale = s.attention_scale;
  a.rope_scale = s.rope_scale;
  a.log2_base = s.log2_base;
  a.qk_eps = s.qk_eps;
  return a;
}

// A layer's attention arguments: the step's, with the layer's head norms and q/k/v biases.
AttentionArgs for_layer(AttentionArgs args, const Layer& layer) {
  args.q_norm = layer.q_norm;
  args.k_norm = layer.k_norm;
  args.qkv_bias = layer.qkv_bias;
  return args;
}

template <typename T, int B, int D>
cudaError_t step(const Shape& s, const Pointers& p, cudaStream_t stream) {
  const Scratch t = carve(s, p.scratch);
  const int qkv_rows = (s.heads + 2 * s.kv_heads) * D;
  const AttentionArgs args = attention_args(s, p);
  const int n = s.batch;
  cudaError_t error = launch_embed<T>(s, p, t.x, stream);
  auto keep = [&error](cudaError_t e) {
    if (error == cudaSuccess) error = e;
  };
  for (const Layer& layer : p.layers) {
    keep(launch_matvec<T, B, kPlain, true>(s, stream, layer.qkv, t.x, layer.input_norm, t.qkv,
                                           qkv_rows, s.hidden));
    keep(launch(attend<T, D>, dim3(s.heads, n), kAttentionThreads, 0, stream, overlap(s),
                static_cast<const T*>(t.qkv), static_cast<T*>(layer.keys),
                static_cast<T*>(layer.values), static_cast<T*>(t.attention), p.positions,
                p.first_columns, p.rope_freqs, for_layer(args, layer)));
    keep(launch_matvec<T, B, kResidual, false>(s, stream, layer.o, t.attention, nullptr, t.x,
                                               s.hidden, s.heads * D));
    keep(launch_matvec<T, B, kSwiglu, true>(s, stream, layer.gate_up, t.x, layer.post_norm,
                                            t.act, s.intermediate, s.hidden));
    keep(launch_matvec<T, B, kResidual, false>(s, stream, layer.down, t.act, nullptr, t.x,
                                               s.hidden, s.intermediate));
  }
  keep(launch_matvec<T, B, kPlain, true>(s, stream, p.lm_head, t.x, p.final_norm, p.logits,
                                         s.vocab, s.hidden));
  return error;
}

// The step with its matmuls through cuBLAS (gemm.h): eight launches a layer where step()
// has five, each matmul near the weights' read rate from 16 rows, and the attention kernel
// for many rows.
template <typename T, int D>
cudaError_t step_gemm(const Shape& s, const Pointers& p, cudaStream_t stream) {
  const Scratch t = carve(s, p.scratch);
  const int n = s.batch, qkv_rows = (s.heads + 2 * s.kv_heads) * D;
  const AttentionArgs args = attention_args(s, p);
  cudaError_t error = launch_embed<T>(s, p, t.x, stream);
  auto keep = [&error](cudaError_t e) {
    if (error == cudaSuccess) error = e;
  };
  const void* pending = nullptr;  // a matmul's output not yet added to the residual stream
  auto norm = [&](const void* weight) {
    keep(launch(add_norm<T>, dim3(n), kThreads, 0, stream, false, t.x, pending, weight, s.eps,
                t.normed, s.hidden));
    pending = t.out;
  };
  // Quantized weights (a batch past the rows of the model's own kernels: own_rows in
  // step.cpp) go through the tensor-core kernel 32 rows at a time, each pass reading the
  // matrix again: a 64-row template would spill its sums (128 registers a thread at 512
  // threads a block).
  Shape part = s;
  part.overlap_rows = 0;  // among the norms' launches, which do not overlap
  auto matmul = [&](const Matrix& w, const void* x, void* out, int n_out, int depth) {
    if (w.bits == 0) return keep(gemm(s.half, stream, w.weight, x, out, n_out, depth, n));
    for (int first = 0; first < n; first += kMaxBatch) {
      part.batch = std::min(kMaxBatch, n - first);
      keep(launch_matvec<T, kMaxBatch, kPlain, false>(
          part, stream, w, static_cast<const T*>(x) + static_cast<size_t>(first) * depth, nullptr,
          static_cast<T*>(out) + static_cast<size_t>(first) * n_out, n_out, depth));
    }
  };
  const int swiglu_blocks = std::min((n * s.intermediate / 8 + kThreads - 1) / kThreads, 1024);
  for (const Layer& layer : p.layers) {
    norm(layer.input_norm);
    matmul(layer.qkv, t.normed, t.qkv, qkv_rows, s.hidden);
    keep(launch(attend_chunked<T, D>, dim3(s.heads, n), kAttentionThreads, 0, stream, false,
                static_cast<const T*>(t.qkv), static_cast<T*>(layer.keys),
                static_cast<T*>(layer.values), static_cast<T*>(t.attention), p.positions,
                p.first_columns, p.rope_freqs, for_layer(args, layer)));
    matmul(layer.o, t.attention, t.out, s.hidden, s.heads * D);
    norm(layer.post_norm);
    matmul(layer.gate_up, t.normed, t.wide, 2 * s.intermediate, s.hidden);
    keep(launch(swiglu<T>, dim3(swiglu_blocks), kThreads, 0, stream, false, t.wide, t.act,
                s.intermediate, n));
    matmul(layer.down, t.act, t.out, s.hidden, s.intermediate);
  }
  norm(p.final_norm);
  matmul(p.lm_head, t.normed, p.logits, s.vocab, s.hidden);
  return error;
}

}  // namespace

// The step for a batch of one dtype and head width: its kernels are compiled for batches of up
// to 1, 2, 4, 8, 16 and 32 rows. Instantiated once for each in step_*.cu (STEP_INSTANCE).
template <typename T, int D>
cudaError_t for_batch(const Shape& s, const Pointers& p, cudaStream_t stream) {
  if (s.batch >= s.gemm_rows) return step_gemm<T, D>(s, p, stream);
  if (s.batch <= 1) return step<T, 1, D>(s, p, stream);
  if (s.batch <= 2) return step<T, 2, D>(s, p, stream);
  if (s.batch <= 4) return step<T, 4, D>(s, p, stream);
  if (s.batch <= 8) return step<T, 8, D>(s, p, stream);
  if (s.batch <= 16) return step<T, 16, D>(s, p, stream);
  return step<T, 32, D>(s, p, stream);
}

#define STEP_INSTANCE(T, D) \
  template cudaError_t for_batch<T, D>(const Shape&, const Pointers&, cudaStream_t)

}  // namespace mlxlab::cuda_decode
