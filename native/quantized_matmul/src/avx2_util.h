// What the AVX2 kernels share: scales as floats per block of columns, the bias terms,
// horizontal sums. x86-64 only; every function is compiled for AVX2/FMA/F16C.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels.h"

#define MLXLAB_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace mlxlab {

MLXLAB_AVX2 inline float horizontal_sum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

// One scale or bias as float: F16C for half, a shift for bfloat16.
MLXLAB_AVX2 inline float load_scale(const void* data, ScaleType type, int64_t index) {
  switch (type) {
    case ScaleType::Float16:
      return _cvtsh_ss(static_cast<const uint16_t*>(data)[index]);
    case ScaleType::BFloat16:
      return _mm_cvtss_f32(_mm_castsi128_ps(
          _mm_cvtsi32_si128(static_cast<int>(static_cast<const uint16_t*>(data)[index]) << 16)));
    default:
      return static_cast<const float*>(data)[index];
  }
}

// `count` scales (or biases) from `start` as floats: 8 halves per F16C instruction, so
// the tiles' inner loops only broadcast floats from memory. A block's are contiguous.
MLXLAB_AVX2 inline void to_floats(const void* data, ScaleType type, int64_t start, int count,
                                  float* out) {
  int i = 0;
  if (type == ScaleType::Float32) {
    std::memcpy(out, static_cast<const float*>(data) + start, sizeof(float) * count);
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(data) + start;
  for (; i + 8 <= count; i += 8) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256 floats = type == ScaleType::Float16
                        ? _mm256_cvtph_ps(halves)
                        : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
    _mm256_storeu_ps(out + i, floats);
  }
  for (; i < count; ++i) out[i] = load_scale(data, type, start + i);
}

// How far ahead the tiles prefetch weights; 2 to 8 measured alike (noisy, shared VM).
constexpr int kPrefetchTiles = 4;

// A block of columns' scales and biases as floats, `groups` per column.
struct Block {
  const float* scales;
  const float* biases;
  int groups;
  int n0;              // the block's first column
  int32_t tail[8];     // the lanes of the last 8 groups of a column (-1: a group)
};

// The bias terms (bias x the group's sum of x) of NB columns and MB rows, 8 groups per
// FMA (the last 8 masked), into the accumulators.
template <int MB, int NB>
MLXLAB_AVX2 inline void add_bias_terms(const Block& b, const float* biases, const float* xsum,
                                       int stride, __m256 acc[NB][MB]) {
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.tail));
  for (int g = 0; g < b.groups; g += 8) {
    const __m256i mask = g + 8 <= b.groups ? _mm256_set1_epi32(-1) : tail;
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __m256 bias = _mm256_maskload_ps(biases + j * b.groups + g, mask);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const __m256 sums = _mm256_loadu_ps(xsum + m * stride + g);  // zero padded
        acc[j][m] = _mm256_fmadd_ps(bias, sums, acc[j][m]);
      }
    }
  }
}

// The scales and biases of columns n0..n1 as floats (in a per-thread buffer).
MLXLAB_AVX2 inline Block block_floats(const Problem& p, int n0, int n1) {
  const int groups = p.K / p.group_size, count = (n1 - n0) * groups;
  thread_local std::vector<float> floats;
  if (floats.size() < 2 * static_cast<size_t>(count)) floats.resize(2 * count);
  const int64_t start = static_cast<int64_t>(n0) * groups;
  to_floats(p.scales, p.scale_type, start, count, floats.data());
  to_floats(p.biases, p.scale_type, start, count, floats.data() + count);
  Block b{floats.data(), floats.data() + count, groups, n0, {}};
  for (int lane = 0; lane < 8; ++lane) b.tail[lane] = lane < (groups - 1) % 8 + 1 ? -1 : 0;
  return b;
}

}  // namespace mlxlab
