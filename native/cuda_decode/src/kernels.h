// A whole one-token decode step of a dense Llama model on an NVIDIA GPU (issue 18).
// Plain CUDA over raw device pointers: nothing here knows MLX.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace mlxlab::cuda_decode {

// One layer's weights (row-major, the model's dtype) and its KV cache buffers.
struct Layer {
  const void* input_norm;  // (hidden)
  const void* qkv;  // ((heads + 2 kv_heads) * head_dim, hidden): q, k and v rows fused
  const void* o;  // (hidden, heads * head_dim)
  const void* post_norm;  // (hidden)
  const void* gate_up;  // (2 intermediate, hidden): gate rows, then up rows
  const void* down;  // (hidden, intermediate)
  void* keys;  // (batch, kv_heads, capacity, head_dim)
  void* values;
};

struct Shape {
  int batch, hidden, heads, kv_heads, head_dim, intermediate, vocab, capacity;
  int column;  // the cache column this token's keys and values go to (mlx-lm's _idx)
  bool half;  // float16 weights; bfloat16 otherwise
  bool traditional;  // RoPE on adjacent pairs (else on the two halves of a head)
  float eps, attention_scale, rope_scale, log2_base;
  size_t shared_limit;  // the most shared memory a block may have on this GPU
  int tensor_rows;  // from this many rows a batch the matvecs run on tensor cores
  int overlap_rows;  // below this many rows, each kernel starts while the one before ends
  int gemm_rows;  // from this many rows the matmuls run through cuBLAS (gemm.h)
};

struct Pointers {
  const int32_t* tokens;  // (batch): this step's input tokens
  const int32_t* positions;  // (batch): RoPE positions (mlx-lm's cache.offset)
  const int32_t* first_columns;  // (batch): the first unmasked column (left padding)
  const float* rope_freqs;  // (head_dim / 2) or null: inv_freq = 1 / freq (Llama 3)
  const void* embedding;  // (vocab, hidden)
  const void* final_norm;
  const void* lm_head;  // (vocab, hidden), the embedding when tied
  void* logits;  // (batch, vocab)
  void* scratch;  // scratch_bytes(shape)
  std::vector<Layer> layers;
};

constexpr int kMaxBatch = 32;  // the step's own kernels
constexpr int kMaxGemmBatch = 64;  // with the matmuls through cuBLAS (Shape::gemm_rows)

size_t scratch_bytes(const Shape& shape);

// Whether the kernels take this shape: head width, alignment, and a batch whose normed
// input fits in a block's shared memory.
bool fits(const Shape& shape);

// Queue the step's kernels on `stream`; returns the first launch error.
cudaError_t launch_step(const Shape& shape, const Pointers& p, cudaStream_t stream);

}  // namespace mlxlab::cuda_decode
