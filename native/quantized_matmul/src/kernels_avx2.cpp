// The AVX2/FMA kernels, compiled for those instructions function by function so the
// library still loads (and runs the scalar kernels) on a CPU without them.
#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define MLXLAB_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace mlxlab {

namespace {

// 32 quantized values from `bits`-wide packing to 4 x 8 floats, in order.
template <int BITS>
MLXLAB_AVX2 inline void unpack32(const uint8_t* src, __m256 out[4]) {
  if constexpr (BITS == 8) {
    for (int i = 0; i < 4; ++i) {
      __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * i));
      out[i] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    }
  } else {
    // Byte j holds values 2j (low nibble) and 2j + 1 (high nibble).
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    __m128i low = _mm_and_si128(packed, mask);
    __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
    __m128i first = _mm_unpacklo_epi8(low, high);
    __m128i second = _mm_unpackhi_epi8(low, high);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(first));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(first, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(second));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(second, 8)));
  }
}

MLXLAB_AVX2 inline float horizontal_sum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

// One scale or bias as float: F16C for half, a shift for bfloat16 (the branch is
// the same for the whole call, so it costs nothing once predicted).
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

// NB output columns from n, MB rows of x from m0. Per group: the dot product of the raw
// quantized values with x, times the scale, plus the bias times the group's sum of x.
// NB x MB independent FMA chains hide the FMA latency when MB is 1.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void tile(const Problem& p, const float* xsum, int n, int m0) {
  const int groups = p.K / GS;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const float* x = p.x + static_cast<int64_t>(m0) * p.K;
  __m256 total[NB][MB];
  float bias_total[NB][MB];
  for (int j = 0; j < NB; ++j) {
    for (int m = 0; m < MB; ++m) {
      total[j][m] = _mm256_setzero_ps();
      bias_total[j][m] = 0.0f;
    }
  }
  for (int g = 0; g < groups; ++g) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) {
      const int64_t at = static_cast<int64_t>(n + j) * groups + g;
      const __m256 scale = _mm256_set1_ps(load_scale(p.scales, p.scale_type, at));
      const float bias = load_scale(p.biases, p.scale_type, at);
#pragma GCC unroll 4
      for (int k = g * GS; k < (g + 1) * GS; k += 32) {
        __m256 w[4];
        unpack32<BITS>(rows + j * row_bytes + k * BITS / 8, w);
#pragma GCC unroll 4
        for (int m = 0; m < MB; ++m) {
          const float* xk = x + static_cast<int64_t>(m) * p.K + k;
          __m256 dot = _mm256_mul_ps(w[0], _mm256_loadu_ps(xk));
          dot = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xk + 8), dot);
          dot = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xk + 16), dot);
          dot = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xk + 24), dot);
          total[j][m] = _mm256_fmadd_ps(dot, scale, total[j][m]);
        }
      }
      for (int m = 0; m < MB; ++m) {
        bias_total[j][m] += bias * xsum[(m0 + m) * groups + g];
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    for (int m = 0; m < MB; ++m) {
      p.y[static_cast<int64_t>(m0 + m) * p.N + n + j] =
          horizontal_sum(total[j][m]) + bias_total[j][m];
    }
  }
}

// Rows m0.. (MB of them) for columns n0..n1: NB at a time, then one by one.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void strip(const Problem& p, const float* xsum, int n0, int n1, int m0) {
  int n = n0;
  for (; n + NB <= n1; n += NB) tile<BITS, GS, MB, NB>(p, xsum, n, m0);
  for (; n < n1; ++n) tile<BITS, GS, MB, 1>(p, xsum, n, m0);
}

template <int BITS, int GS>
MLXLAB_AVX2 void rows(const Problem& p, const float* xsum, int n0, int n1) {
  // The caller's column block is small (16 columns), so its weights stay in L1
  // while every strip of 4 rows of x passes over them.
  int m = 0;
  for (; m + 4 <= p.M; m += 4) strip<BITS, GS, 4, 1>(p, xsum, n0, n1, m);
  switch (p.M - m) {
    case 3: strip<BITS, GS, 3, 2>(p, xsum, n0, n1, m); break;
    case 2: strip<BITS, GS, 2, 2>(p, xsum, n0, n1, m); break;
    case 1: strip<BITS, GS, 1, 4>(p, xsum, n0, n1, m); break;
    default: break;
  }
}

template <int BITS>
MLXLAB_AVX2 void dequantize(const Problem& p, int n0, int n1, float* out) {
  const int groups = p.K / p.group_size;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* row = p.w + static_cast<int64_t>(n) * p.K * BITS / 8;
    float* dst = out + static_cast<int64_t>(n - n0) * p.K;
    for (int g = 0; g < groups; ++g) {
      const int64_t at = static_cast<int64_t>(n) * groups + g;
      const __m256 scale = _mm256_set1_ps(load_scale(p.scales, p.scale_type, at));
      const __m256 bias = _mm256_set1_ps(load_scale(p.biases, p.scale_type, at));
      for (int k = g * p.group_size; k < (g + 1) * p.group_size; k += 32) {
        __m256 w[4];
        unpack32<BITS>(row + k * BITS / 8, w);
        for (int i = 0; i < 4; ++i) {
          _mm256_storeu_ps(dst + k + 8 * i, _mm256_fmadd_ps(w[i], scale, bias));
        }
      }
    }
  }
}

}  // namespace

bool avx2_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c");
  return supported;
}

void rows_avx2(const Problem& p, const float* xsum, int n0, int n1) {
  // Every (bits, group size) pair gets its own fully unrolled kernel.
  const int key = p.bits * 1000 + p.group_size;
  switch (key) {
    case 4032: rows<4, 32>(p, xsum, n0, n1); break;
    case 4064: rows<4, 64>(p, xsum, n0, n1); break;
    case 4128: rows<4, 128>(p, xsum, n0, n1); break;
    case 8032: rows<8, 32>(p, xsum, n0, n1); break;
    case 8064: rows<8, 64>(p, xsum, n0, n1); break;
    default: rows<8, 128>(p, xsum, n0, n1); break;
  }
}

void dequantize_avx2(const Problem& p, int n0, int n1, float* out) {
  p.bits == 8 ? dequantize<8>(p, n0, n1, out) : dequantize<4>(p, n0, n1, out);
}

}  // namespace mlxlab

#else  // not x86-64: the scalar kernels only

namespace mlxlab {
bool avx2_supported() { return false; }
void rows_avx2(const Problem& p, const float* xsum, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
void dequantize_avx2(const Problem& p, int n0, int n1, float* out) {
  dequantize_scalar(p, n0, n1, out);
}
}  // namespace mlxlab

#endif
