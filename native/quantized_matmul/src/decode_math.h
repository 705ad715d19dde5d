// The float32 math of one Llama decoder layer at decode (one query per row), in the
// order mlx-lm's TransformerBlock and MLX's CPU fallbacks compute it. AVX2/FMA only:
// the Python side turns the fused layers on where kernel_name() is "avx2".
#pragma once

#include <cstdint>
#include <vector>

namespace mlxlab {

// x * rsqrt(mean(x^2) + eps) * weight, one row of D.
void rms_norm(const float* x, const float* weight, int D, float eps, float* out);

// A RoPE: the first `dims` of each head rotated, in pairs of neighbours (traditional) or
// of the two halves; theta_i = position * scale * base^(-i/half), or position * scale *
// inv_freqs[i] where a table is given (Llama 3's, YaRN's, LongRoPE's); the rotated part
// first multiplied by mscale (YaRN's, LongRoPE's).
struct Rope {
  int dims;
  float base, scale;
  bool traditional;
  const float* inv_freqs = nullptr;
  float mscale = 1;
};

// MLX's RoPE of one row's heads at `position`.
void rope(float* heads, int n_heads, int head_dim, float position, const Rope& r);

// The keys or values of one row: element (head, s, d) at data[head * head + s * seq + d],
// float32, or float16 where `half` (the cache llama.cpp also keeps: half the bytes that
// attention reads each step).
struct KVRow {
  const void* data;
  int64_t head, seq;
  bool half;
  KVRow at_head(int h) const {
    const int64_t offset = h * head * (half ? 2 : 4);
    return {static_cast<const char*>(data) + offset, head, seq, half};
  }
};

// One row's additive or boolean mask over the S keys; kind 0: none.
struct MaskRow {
  const void* data = nullptr;
  int kind = 0;  // 0 none, 1 bool (false masks), 2 float32 (added)
  int64_t seq = 0;
};

// softmax(q * scale @ K^T) @ V for one query head over the first S keys of its key/value
// head (`keys` and `values` at that head: element (s, d) at [s * seq + d]); out is head_dim
// floats. A float16 key or value is widened exactly, so both kinds compute the same math.
void attend(const float* q, int head_dim, int S, const KVRow& keys, const KVRow& values,
            const MaskRow& mask, float scale, float* out);

// act(gate) * up, n values, in place in gate: 0 SiLU, 1 GELU's tanh approximation (MLX's
// gelu_approx), 2 GELU (erf).
void gated(float* gate, const float* up, int n, int activation);

// a + b, n values, into a.
void add_into(float* a, const float* b, int n);

}  // namespace mlxlab
