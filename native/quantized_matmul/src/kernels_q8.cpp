// The int8-activation variant (opt-in, MLXLAB_QMM_INT8=1: it changes numerics), llama.cpp's
// Q8 trick without VNNI: x quantized per 32 values to int8 and a float scale, the dot of
// 32 weights with them in 3 integer instructions (maddubs, madd, convert) instead of 12.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels.h"

namespace mlxlab {

namespace {
bool g_int8 = [] {
  const char* value = std::getenv("MLXLAB_QMM_INT8");
  return value != nullptr && std::strcmp(value, "1") == 0;
}();
}  // namespace

bool int8_activations() { return g_int8; }
void set_int8_activations(bool on) { g_int8 = on; }

void quantize_q8(const Problem& p, Q8Rows& q) {
  const int chunks = p.K / 32;
  q.values.resize(static_cast<size_t>(p.M) * p.K);
  q.scales.resize(static_cast<size_t>(p.M) * chunks);
  for (int m = 0; m < p.M; ++m) {
    for (int c = 0; c < chunks; ++c) {
      const float* x = p.x + static_cast<int64_t>(m) * p.K + c * 32;
      int8_t* out = q.values.data() + static_cast<int64_t>(m) * p.K + c * 32;
      float largest = 0.0f;
      for (int i = 0; i < 32; ++i) largest = std::max(largest, std::abs(x[i]));
      const float scale = largest / 127.0f, inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      q.scales[static_cast<size_t>(m) * chunks + c] = scale;
      for (int i = 0; i < 32; ++i) {
        // 4-bit weights unpack as the even values then the odd ones (low, high nibbles).
        const int at = p.bits == 4 ? (i % 2) * 16 + i / 2 : i;
        out[at] = static_cast<int8_t>(std::lrint(x[i] * inverse));
      }
    }
  }
}

}  // namespace mlxlab

#if defined(__x86_64__) || defined(_M_X64)
#include "avx2_util.h"

namespace mlxlab {

namespace {

// 32 weights as bytes. 4-bit: the low nibbles in the low lane, the high ones in the high
// lane (x is quantized in that order). 8-bit: q - 128 as int8, as maddubs multiplies
// unsigned by signed and 255 x 127 x 2 would saturate its int16 pair sums.
template <int BITS>
MLXLAB_AVX2 inline __m256i load32(const uint8_t* src) {
  if constexpr (BITS == 8) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    return _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m256i both =
        _mm256_inserti128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
}

// The dot of 32 weights with 32 int8 x, as 8 float lanes. 8-bit: |w| times x with w's
// sign (the sign trick), so maddubs gets its unsigned operand.
template <int BITS>
MLXLAB_AVX2 inline __m256 dot32(__m256i w, __m256i xq) {
  __m256i pairs;
  if constexpr (BITS == 8) {
    pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xq, w));
  } else {
    pairs = _mm256_maddubs_epi16(w, xq);
  }
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// NB columns from n, MB rows from m0, as the float tile: per chunk of 32, the integer
// dot times (x's chunk scale x the group's scale) into the accumulator.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void tile_q8(const Problem& p, const Block& b, const float* xsum, const Q8Rows& q,
                         int n, int m0) {
  constexpr int kChunkBytes = 32 * BITS / 8;
  const int chunks = p.K / 32;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const int8_t* xq = q.values.data() + static_cast<int64_t>(m0) * p.K;
  const float* xscales = q.scales.data() + static_cast<int64_t>(m0) * chunks;
  const float* scales = b.scales + static_cast<int64_t>(n - b.n0) * b.groups;
  __m256 acc[NB][MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) acc[j][m] = _mm256_setzero_ps();
  }
  const int stride = xsum_stride(b.groups);
  add_bias_terms<MB, NB>(b, b.biases + (scales - b.scales), xsum + m0 * stride, stride, acc);
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchTiles * NB * row_bytes);
  for (int c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int line = 0; line < NB * kChunkBytes || line == 0; line += 64) {
      _mm_prefetch(ahead + c * NB * kChunkBytes + line, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __m256i w = load32<BITS>(rows + j * row_bytes + c * kChunkBytes);
      const __m256 scale = _mm256_broadcast_ss(scales + j * b.groups + c * 32 / GS);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const __m256i x = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(xq + static_cast<int64_t>(m) * p.K + c * 32));
        const __m256 both = _mm256_mul_ps(scale, _mm256_broadcast_ss(xscales + m * chunks + c));
        acc[j][m] = _mm256_fmadd_ps(dot32<BITS>(w, x), both, acc[j][m]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) {
      p.y[static_cast<int64_t>(m0 + m) * p.N + n + j] = horizontal_sum(acc[j][m]);
    }
  }
}

template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void strip_q8(const Problem& p, const Block& b, const float* xsum, const Q8Rows& q,
                          int n1, int m0) {
  int n = b.n0;
  for (; n + NB <= n1; n += NB) tile_q8<BITS, GS, MB, NB>(p, b, xsum, q, n, m0);
  for (; n < n1; ++n) tile_q8<BITS, GS, MB, 1>(p, b, xsum, q, n, m0);
}

template <int BITS, int GS>
MLXLAB_AVX2 void rows_q8(const Problem& p, const float* xsum, const Q8Rows& q, int n0, int n1) {
  Block b = block_floats(p, n0, n1);
  if (BITS == 8) {
    // The weights enter the dots as q - 128: the bias terms take the 128 x scale back.
    float* biases = const_cast<float*>(b.biases);
    for (int i = 0; i < (n1 - n0) * b.groups; ++i) biases[i] += 128.0f * b.scales[i];
  }
  int m = 0;
  for (; m + 4 <= p.M; m += 4) strip_q8<BITS, GS, 4, 2>(p, b, xsum, q, n1, m);
  for (; m + 2 <= p.M; m += 2) strip_q8<BITS, GS, 2, 4>(p, b, xsum, q, n1, m);
  if (m < p.M) strip_q8<BITS, GS, 1, 4>(p, b, xsum, q, n1, m);
}

}  // namespace

void rows_q8_avx2(const Problem& p, const float* xsum, const Q8Rows& q, int n0, int n1) {
  switch (p.bits * 1000 + p.group_size) {
    case 4032: rows_q8<4, 32>(p, xsum, q, n0, n1); break;
    case 4064: rows_q8<4, 64>(p, xsum, q, n0, n1); break;
    case 4128: rows_q8<4, 128>(p, xsum, q, n0, n1); break;
    case 8032: rows_q8<8, 32>(p, xsum, q, n0, n1); break;
    case 8064: rows_q8<8, 64>(p, xsum, q, n0, n1); break;
    default: rows_q8<8, 128>(p, xsum, q, n0, n1); break;
  }
}

}  // namespace mlxlab

#else  // not x86-64: the float kernels

namespace mlxlab {
void rows_q8_avx2(const Problem& p, const float* xsum, const Q8Rows&, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
}  // namespace mlxlab

#endif
