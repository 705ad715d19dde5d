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

// As kernels_avx2.cpp's tile: NB columns from n, MB rows from m0, accumulators in
// registers (32 of them here), the bias terms in 8-lane accumulators of their own.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX512 void tile(const Problem& p, const float* x_in, const Block& b, const float* xsum,
                        int n, int m0) {
  constexpr int kGroupBytes = GS * BITS / 8;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const float* x = x_in + static_cast<int64_t>(m0) * p.K;
  const float* scales = b.scales + static_cast<int64_t>(n - b.n0) * b.groups;
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
  const int stride = xsum_stride(b.groups);
  add_bias_terms<MB, NB>(b, b.biases + (scales - b.scales), xsum + m0 * stride, stride,
                         bias_acc);
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchTiles * NB * row_bytes);
  const uint8_t* wrow[NB];
  const float* xrow[MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) wrow[j] = rows + j * row_bytes;
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m) xrow[m] = x + static_cast<int64_t>(m) * p.K;
  for (int g = 0; g < b.groups; ++g) {
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
        const __m512 scale = _mm512_set1_ps(scales[j * b.groups + g]);
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

template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX512 void strip(const Problem& p, const float* x, const Block& b, const float* xsum,
                         int n1, int m0) {
  int n = b.n0;
  for (; n + NB <= n1; n += NB) tile<BITS, GS, MB, NB>(p, x, b, xsum, n, m0);
  for (; n < n1; ++n) tile<BITS, GS, MB, 1>(p, x, b, xsum, n, m0);
}

template <int BITS, int GS>
MLXLAB_AVX512 void rows(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  const Block b = block_floats(p, n0, n1);
  int m = 0;
  for (; m + 8 <= p.M; m += 8) strip<BITS, GS, 8, 2>(p, x, b, xsum, n1, m);
  for (; m + 4 <= p.M; m += 4) strip<BITS, GS, 4, 4>(p, x, b, xsum, n1, m);
  switch (p.M - m) {
    case 3: strip<BITS, GS, 3, 4>(p, x, b, xsum, n1, m); break;
    case 2: strip<BITS, GS, 2, 4>(p, x, b, xsum, n1, m); break;
    case 1: strip<BITS, GS, 1, 4>(p, x, b, xsum, n1, m); break;
    default: break;
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
  for_shape(p, [&](auto bits, auto gs) { rows<bits(), gs()>(p, x, xsum, n0, n1); });
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
