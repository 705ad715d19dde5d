// The step's matrix-vector kernels for MLX's affine quantization: each weight
// w = scale * q + bias, q of BITS (4 or 8) bits, one scale and bias (the model's dtype) for
// each GROUP weights of a row, 32 / BITS q a 32-bit word with the first in its lowest bits
// (as mx.quantize packs them). bench/gpu_qmatvec.cu checks them against a host reference
// and times them on their own.
#pragma once

#include "matvec.cuh"

namespace mlxlab::cuda_decode {
namespace {

// The weights a 16-byte chunk of a packed row holds.
template <int BITS>
constexpr int kChunkWeights = 128 / BITS;

// The 32 / BITS values of a word as floats: each q put in a float's mantissa under 2^23's
// exponent, less 2^23 (a bit operation and an add, where an int-to-float conversion runs at
// an eighth of the rate).
template <int BITS>
__device__ __forceinline__ void unpack_word(uint32_t word, float* out) {
  constexpr uint32_t kMask = (1u << BITS) - 1;
#pragma unroll
  for (int j = 0; j < 32 / BITS; ++j) {
    out[j] = __uint_as_float(0x4b000000u | ((word >> (BITS * j)) & kMask)) - 8388608.0f;
  }
}

template <int BITS>
__device__ __forceinline__ void unpack_chunk(const uint4& chunk, float* out) {
  constexpr int kPerWord = 32 / BITS;
  unpack_word<BITS>(chunk.x, out);
  unpack_word<BITS>(chunk.y, out + kPerWord);
  unpack_word<BITS>(chunk.z, out + 2 * kPerWord);
  unpack_word<BITS>(chunk.w, out + 3 * kPerWord);
}

// One 16-byte chunk of two rows against chunk `c` of each input row:
// scale * sum(x q) + bias * sum(x), as MLX's quantized matmul sums a group.
template <typename T, int B, int BITS>
__device__ __forceinline__ void accumulate_quantized(const uint4& word0, const uint4& word1,
                                                     float2 affine0, float2 affine1, const T* in,
                                                     int depth, int c, int batch, float* acc0,
                                                     float* acc1) {
  constexpr int kWeights = kChunkWeights<BITS>;
  float q0[kWeights], q1[kWeights];
  unpack_chunk<BITS>(word0, q0);
  unpack_chunk<BITS>(word1, q1);
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (b >= batch) break;
    const uint4* x = reinterpret_cast<const uint4*>(in + b * depth + c * kWeights);
    float dot0 = 0.0f, dot1 = 0.0f, sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWeights / 8; ++k) {
      float v[8];
      unpack8<T>(x[k], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        dot0 = fmaf(q0[8 * k + i], v[i], dot0);
        dot1 = fmaf(q1[8 * k + i], v[i], dot1);
        sum += v[i];
      }
    }
    acc0[b] += fmaf(affine0.x, dot0, affine0.y * sum);
    acc1[b] += fmaf(affine1.x, dot1, affine1.y * sum);
  }
}

template <typename T>
__device__ __forceinline__ float2 affine(const T* scales, const T* biases, size_t at) {
  return make_float2(to_float(scales[at]), to_float(biases[at]));
}

// Rows of the packed `w` ((n_out, depth * BITS / 32) words; for kSwiglu n_out gate rows then
// n_out up rows) times `batch` (at most B) input vectors of `depth` (a multiple of GROUP),
// as matvec() does for dense weights: the same staging, two rows a warp, the same outputs.
// GROUP is 32 or 64 (a 16-byte chunk never spans two groups).
template <typename T, int B, int MODE, bool NORM, int BITS, int GROUP>
__global__ void __launch_bounds__(kThreads)
    quantized_matvec(const uint32_t* __restrict__ w, const T* __restrict__ scales,
                     const T* __restrict__ biases, const T* x, const T* __restrict__ norm_weight,
                     float eps, T* out, int n_out, int depth, int batch, bool stage) {
  constexpr int kWeights = kChunkWeights<BITS>;
  static_assert(GROUP % kWeights == 0, "a chunk lies in one group");
  extern __shared__ __align__(16) unsigned char shared[];
  const int lane = threadIdx.x % 32;
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  const int words = depth / 32 * BITS, groups = depth / GROUP, chunks = depth / kWeights;
  release_next();
  await_previous();
  const T* in = x;
  if constexpr (NORM) {
    stage_normed<T, B, kWarps>(x, norm_weight, eps, depth, depth, batch,
                               reinterpret_cast<T*>(shared));
    in = reinterpret_cast<const T*>(shared);
  } else if (stage) {
    stage_rows(x, depth, depth, batch, reinterpret_cast<T*>(shared));
    in = reinterpret_cast<const T*>(shared);
  }
  for (int unit = blockIdx.x * kWarps + threadIdx.x / 32; unit < units;
       unit += gridDim.x * kWarps) {
    const int first = first_row<MODE>(unit), second = second_row<MODE>(unit, n_out);
    const uint4* w0 = reinterpret_cast<const uint4*>(w + static_cast<size_t>(first) * words);
    const uint4* w1 = reinterpret_cast<const uint4*>(w + static_cast<size_t>(second) * words);
    const size_t g0 = static_cast<size_t>(first) * groups, g1 = static_cast<size_t>(second) * groups;
    float acc0[B], acc1[B];
#pragma unroll
    for (int b = 0; b < B; ++b) acc0[b] = acc1[b] = 0.0f;
    int c = lane;
    // kDepth chunks of each row in flight a lane, as matvec() keeps them.
    for (; c + 32 * (kDepth - 1) < chunks; c += 32 * kDepth) {
      uint4 r0[kDepth], r1[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        r0[u] = __ldg(w0 + c + 32 * u);
        r1[u] = __ldg(w1 + c + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int g = (c + 32 * u) * kWeights / GROUP;
        accumulate_quantized<T, B, BITS>(r0[u], r1[u], affine(scales, biases, g0 + g),
                                   affine(scales, biases, g1 + g), in, depth, c + 32 * u, batch,
                                   acc0, acc1);
      }
    }
    for (; c < chunks; c += 32) {
      const int g = c * kWeights / GROUP;
      accumulate_quantized<T, B, BITS>(__ldg(w0 + c), __ldg(w1 + c), affine(scales, biases, g0 + g),
                                 affine(scales, biases, g1 + g), in, depth, c, batch, acc0, acc1);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      acc0[b] = warp_sum(acc0[b]);
      acc1[b] = warp_sum(acc1[b]);
    }
    if (lane == 0) store_unit<T, B, MODE>(out, n_out, unit, batch, acc0, acc1);
  }
}

// The rows of a quantized embedding table for `tokens`, dequantized as mx.dequantize does
// (scale * q + bias, rounded to T): one block a token.
template <typename T, int BITS, int GROUP>
__global__ void quantized_embed(const uint32_t* __restrict__ table, const T* __restrict__ scales,
                                const T* __restrict__ biases, const int32_t* __restrict__ tokens,
                                T* __restrict__ x, int hidden) {
  release_next();
  await_previous();
  const size_t token = static_cast<size_t>(tokens[blockIdx.x]);
  constexpr int kPerWord = 32 / BITS;
  const int words = hidden / kPerWord;
  const uint32_t* row = table + token * words;
  T* to = x + static_cast<size_t>(blockIdx.x) * hidden;
  for (int word = threadIdx.x; word < words; word += blockDim.x) {
    const float2 a = affine(scales, biases, token * (hidden / GROUP) + word * kPerWord / GROUP);
    float q[kPerWord];
    unpack_word<BITS>(row[word], q);
#pragma unroll
    for (int j = 0; j < kPerWord; ++j) {
      to[word * kPerWord + j] = from_float<T>(fmaf(a.x, q[j], a.y));
    }
  }
}
}  // namespace
}  // namespace mlxlab::cuda_decode
