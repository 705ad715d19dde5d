// The AVX-512 decode kernels: the AVX2 tiles' scheme (kernels_avx2.cpp) on 16 floats a
// vector, compiled for AVX-512 function by function and chosen at run time, so the same
// library runs the AVX2 kernels on a CPU without it.
//
// A 4-bit chunk of 32 weights is 16 bytes; zero-extending them to 16 lanes gives the even
// weights in the low nibbles and the odd ones in the high nibbles, with no shuffle. So x
// is reordered the same way once per call (even positions of each chunk, then odd), and
// a chunk's dot product is two FMAs over vectors in matching order.
#include <cstring>

#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include "avx2_util.h"

// GCC 12's AVX-512 headers start vectors as `__Y = __Y`, which -Wall reports in every caller.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define MLXLAB_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

namespace mlxlab {

namespace {

// 32 quantized values as 2 x 16 floats: for 4 bits, the even then the odd ones (the
// order x_in_nibble_order(p, 32, ...) gives x); for 8 bits, in order.
template <int BITS>
MLXLAB_AVX512 inline void unpack32(const uint8_t* src, __m512 out[2]) {
  if constexpr (BITS == 8) {
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(src))));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(src + 16))));
  } else {
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    out[0] = _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0xF)));
    out[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4));
  }
}

MLXLAB_AVX512 inline float horizontal_sum512(__m512 v) { return _mm512_reduce_add_ps(v); }

// One scale or bias of type T as a float, read where it is stored.
template <ScaleType T>
MLXLAB_AVX512 inline float scale_of(const void* data, int64_t index) {
  if constexpr (T == ScaleType::Float16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(data)[index]);
  } else if constexpr (T == ScaleType::BFloat16) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(data)[index]) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  } else {
    return static_cast<const float*>(data)[index];
  }
}

// Up to 8 of them from `index` as floats, the lanes outside `mask` zero (and not read).
template <ScaleType T>
MLXLAB_AVX512 inline __m256 eight_of(const void* data, int64_t index, __mmask8 mask) {
  if constexpr (T == ScaleType::Float32) {
    return _mm256_maskz_loadu_ps(mask, static_cast<const float*>(data) + index);
  } else {
    const __m128i halves = _mm_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(data) + index);
    if constexpr (T == ScaleType::Float16) return _mm256_cvtph_ps(halves);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
  }
}

// As kernels_avx2.cpp's tile: NB columns from n, MB rows from m0, accumulators in
// registers (32 of them here), the bias terms in 8-lane accumulators of their own. The
// scales and biases are read as stored (T), beside the weights and prefetched as they are:
// converting a block's to floats first was a pass of its own over them, a fifth of a
// one-row call's time.
template <int BITS, int GS, int MB, int NB, ScaleType T>
MLXLAB_AVX512 void tile(const Problem& p, const float* x_in, const float* xsum, int n, int m0) {
  constexpr int kGroupBytes = GS * BITS / 8;
  constexpr int kScaleBytes = T == ScaleType::Float32 ? 4 : 2;
  const int groups = p.K / GS;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const float* x = x_in + static_cast<int64_t>(m0) * p.K;
  const int64_t first = static_cast<int64_t>(n) * groups;  // this tile's first scale
  __m512 acc[NB][MB];
  __m256 bias_acc[NB][MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) {
      acc[j][m] = _mm512_setzero_ps();
      bias_acc[j][m] = _mm256_setzero_ps();
    }
  }
  // The scales and biases of the tile the weights' prefetch reaches.
  const int64_t ahead_scales = (first + kPrefetchTiles * NB * groups) * kScaleBytes;
  for (int line = 0; line < NB * groups * kScaleBytes; line += 64) {
    _mm_prefetch(static_cast<const char*>(p.scales) + ahead_scales + line, _MM_HINT_T0);
    _mm_prefetch(static_cast<const char*>(p.biases) + ahead_scales + line, _MM_HINT_T0);
  }
  const int stride = xsum_stride(groups);
  const __mmask8 tail = static_cast<__mmask8>(groups % 8 ? (1u << (groups % 8)) - 1 : 0xFF);
  for (int g = 0; g < groups; g += 8) {
    const __mmask8 mask = g + 8 <= groups ? static_cast<__mmask8>(0xFF) : tail;
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __m256 bias = eight_of<T>(p.biases, first + j * groups + g, mask);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const __m256 sums = _mm256_loadu_ps(xsum + (m0 + m) * stride + g);  // zero padded
        bias_acc[j][m] = _mm256_fmadd_ps(bias, sums, bias_acc[j][m]);
      }
    }
  }
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchTiles * NB * row_bytes);
  const uint8_t* wrow[NB];
  const float* xrow[MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) wrow[j] = rows + j * row_bytes;
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m) xrow[m] = x + static_cast<int64_t>(m) * p.K;
  for (int g = 0; g < groups; ++g) {
#pragma GCC unroll 4
    for (int line = 0; line < NB * kGroupBytes || line == 0; line += 64) {
      _mm_prefetch(ahead + g * NB * kGroupBytes + line, _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int c = 0; c < GS; c += 32) {
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        __m512 w[2];
        unpack32<BITS>(wrow[j] + g * kGroupBytes + c * BITS / 8, w);
        const __m512 scale = _mm512_set1_ps(scale_of<T>(p.scales, first + j * groups + g));
#pragma GCC unroll 8
        for (int m = 0; m < MB; ++m) {
          const float* xm = xrow[m] + g * GS + c;
          __m512 dot = _mm512_mul_ps(w[0], _mm512_loadu_ps(xm));
          dot = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xm + 16), dot);
          acc[j][m] = _mm512_fmadd_ps(dot, scale, acc[j][m]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) {
      p.y[static_cast<int64_t>(m0 + m) * p.N + n + j] =
          horizontal_sum512(acc[j][m]) + horizontal_sum(bias_acc[j][m]);
    }
  }
}

template <int BITS, int GS, int MB, int NB, ScaleType T>
MLXLAB_AVX512 void strip(const Problem& p, const float* x, const float* xsum, int n0, int n1,
                         int m0) {
  int n = n0;
  for (; n + NB <= n1; n += NB) tile<BITS, GS, MB, NB, T>(p, x, xsum, n, m0);
  for (; n < n1; ++n) tile<BITS, GS, MB, 1, T>(p, x, xsum, n, m0);
}

template <int BITS, int GS, ScaleType T>
MLXLAB_AVX512 void rows(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  int m = 0;
  for (; m + 8 <= p.M; m += 8) strip<BITS, GS, 8, 2, T>(p, x, xsum, n0, n1, m);
  for (; m + 4 <= p.M; m += 4) strip<BITS, GS, 4, 4, T>(p, x, xsum, n0, n1, m);
  switch (p.M - m) {
    case 3: strip<BITS, GS, 3, 4, T>(p, x, xsum, n0, n1, m); break;
    case 2: strip<BITS, GS, 2, 4, T>(p, x, xsum, n0, n1, m); break;
    case 1: strip<BITS, GS, 1, 4, T>(p, x, xsum, n0, n1, m); break;
    default: break;
  }
}

template <int BITS, int GS>
void rows_typed(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  switch (p.scale_type) {
    case ScaleType::Float16: rows<BITS, GS, ScaleType::Float16>(p, x, xsum, n0, n1); break;
    case ScaleType::BFloat16: rows<BITS, GS, ScaleType::BFloat16>(p, x, xsum, n0, n1); break;
    default: rows<BITS, GS, ScaleType::Float32>(p, x, xsum, n0, n1); break;
  }
}

}  // namespace

bool avx512_supported() {
  static const bool supported = avx2_supported() && __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl");
  return supported;
}

void rows_avx512(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  for_shape(p, [&](auto bits, auto gs) { rows_typed<bits(), gs()>(p, x, xsum, n0, n1); });
}

}  // namespace mlxlab

#else  // not x86-64

namespace mlxlab {
bool avx512_supported() { return false; }
void rows_avx512(const Problem& p, const float*, const float* xsum, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
}  // namespace mlxlab

#endif
