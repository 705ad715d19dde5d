// A whole one-token decode step of a model of Llama's layer (with or without Qwen3's q and k
// head norms and Qwen2's q/k/v biases) on an NVIDIA GPU.
// Plain CUDA over raw device pointers: nothing here knows MLX.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace mlxlab::cuda_decode {

// A (rows, depth) matrix: plain (the model's dtype, row-major), or in MLX's affine
// quantization: rows of depth * bits / 32 packed words, a scale and a bias (the model's
// dtype) for each `group` weights of a row.
struct Matrix {
  const void* weight = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int bits = 0;  // 0: plain; 4 or 8
  int group = 0;  // 32 or 64
};

// One layer's weights and its KV cache buffers.
struct Layer {
  const void* input_norm;  // (hidden)
  Matrix qkv;  // ((heads + 2 kv_heads) * head_dim, hidden): q, k and v rows fused
  Matrix o;  // (hidden, heads * head_dim)
  const void* post_norm;  // (hidden)
  Matrix gate_up;  // (2 intermediate, hidden): gate rows, then up rows
  Matrix down;  // (hidden, intermediate)
  // Each query and key head's RMSNorm weight, before RoPE (Qwen3's), or null: no such norms.
  const void* q_norm = nullptr;  // (head_dim)
  const void* k_norm = nullptr;
  // The fused q/k/v rows' biases (Qwen2's), or null: none.
  const void* qkv_bias = nullptr;  // ((heads + 2 kv_heads) * head_dim)
  void* keys;  // (batch, kv_heads, capacity, head_dim)
  void* values;
};

struct Shape {
  int batch, hidden, heads, kv_heads, head_dim, intermediate, vocab, capacity;
  int column;  // the cache column this token's keys and values go to (mlx-lm's _idx)
  bool half;  // float16 activations (and plain weights); bfloat16 otherwise
  bool traditional;  // RoPE on adjacent pairs (else on the two halves of a head)
  float eps, attention_scale, rope_scale, log2_base;
  float qk_eps;  // the q and k head norms' epsilon (where the layers have them)
  bool qkv_bias;  // the layers' q/k/v projections have biases
  size_t shared_limit;  // the most shared memory a block may have on this GPU
  int tensor_rows;  // from this many rows a batch the matvecs run on tensor cores
  int overlap_rows;  // below this many rows, each kernel starts while the one before ends
  int gemm_rows;  // from this many rows the matmuls run through cuBLAS (gemm.h): plain only
};

struct Pointers {
  const int32_t* tokens;  // (batch): this step's input tokens
  const int32_t* positions;  // (batch): RoPE positions (mlx-lm's cache.offset)
  const int32_t* first_columns;  // (batch): the first unmasked column (left padding)
  const float* rope_freqs;  // (head_dim / 2) or null: inv_freq = 1 / freq (Llama 3)
  Matrix embedding;  // (vocab, hidden)
  const void* final_norm;
  Matrix lm_head;  // (vocab, hidden), the embedding when tied
  void* logits;  // (batch, vocab)
  void* scratch;  // scratch_bytes(shape)
  std::vector<Layer> layers;
  const int32_t* column_at = nullptr;  // where not null, Shape::column read from device memory
};

// A replayed step's slots: its tokens, positions, first columns and column, where the graph's
// kernels read them (step.cpp's Replay). Staged by a kernel, as the tokens are the device's.
struct Slots {
  int32_t* tokens;  // (kMaxGemmBatch) each
  int32_t* positions;
  int32_t* first_columns;
  int32_t* column;  // (1)
};

constexpr int kMaxBatch = 32;  // the step's own kernels (quantized weights included)
constexpr int kMaxGemmBatch = 64;  // with the matmuls through cuBLAS (Shape::gemm_rows)

size_t scratch_bytes(const Shape& shape);

// Whether the kernels take a quantization: (bits, group) of 4 or 8 and 32 or 64.
bool takes_quantization(int bits, int group);

// Whether the kernels take this shape: head width, alignment, and a batch whose normed
// input fits in a block's shared memory.
bool fits(const Shape& shape);

// Queue the step's kernels on `stream`; returns the first launch error.
cudaError_t launch_step(const Shape& shape, const Pointers& p, cudaStream_t stream);

// The slots' size in bytes, and the slots in `base` (device memory of that size).
size_t slot_bytes();
Slots carve_slots(void* base);

// Queue the copy of a step's tokens, positions, first columns and column into the slots.
cudaError_t stage_inputs(const Shape& shape, const Pointers& p, const Slots& slots,
                         cudaStream_t stream);

}  // namespace mlxlab::cuda_decode
