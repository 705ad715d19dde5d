// The integer-activation variants. int8 (opt-in, MLXLAB_QMM_INT8=1: it changes numerics by
// about 1%) is llama.cpp's Q8 trick without VNNI: x quantized per 32 values to int8 and a
// float scale, the dot of 32 weights with them in 3 integer instructions (maddubs, madd,
// convert) instead of 12. int16 (MLXLAB_QMM_INT16) quantizes x per 32 values to int16:
// the dot is two madds and a convert, and the error about 2e-5 of the largest output
// (float32 tiles: 3e-7; MLX's own path on a bfloat16 model: about 1e-2).
#include <cmath>
#include <type_traits>

#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace mlxlab {

namespace {
// x rounded to the nearest integer, ties to even: std::lrint under the default rounding
// mode, in one instruction on x86-64, where lrint is a libm call a value (int16 prefill
// of the default model 403-409 -> 425-434 tok/s; float's is 525-531).
inline int round_even(float x) {
#if defined(__x86_64__) || defined(_M_X64)
  return _mm_cvtss_si32(_mm_set_ss(x));
#else
  return static_cast<int>(std::lrint(x));
#endif
}

// Off until the Python that loads the library sets them from the settings.
bool g_int8 = false;
bool g_int16 = false;

void corrections(const Problem& p, Q16Rows& q);

template <typename X>
void quantize_rows(const Problem& p, QuantizedRows<X>& q) {
  constexpr float kLargest = std::is_same_v<X, int8_t> ? 127.0f : 32767.0f;
  const int chunks = p.K / 32;
  q.values.resize(static_cast<size_t>(p.M) * p.K);
  q.scales.resize(static_cast<size_t>(p.M) * chunks);
  for (int m = 0; m < p.M; ++m) {
    for (int c = 0; c < chunks; ++c) {
      const float* x = p.x + static_cast<int64_t>(m) * p.K + c * 32;
      X* out = q.values.data() + static_cast<int64_t>(m) * p.K + c * 32;
      float largest = 0.0f;
      for (int i = 0; i < 32; ++i) largest = std::max(largest, std::abs(x[i]));
      const float scale = largest / kLargest, inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
      q.scales[static_cast<size_t>(m) * chunks + c] = scale;
      for (int i = 0; i < 32; ++i) {
        // 4-bit weights unpack as the even values then the odd ones (low, high nibbles).
        const int at = p.bits == 4 ? (i % 2) * 16 + i / 2 : i;
        out[at] = static_cast<X>(round_even(x[i] * inverse));
      }
    }
  }
  if constexpr (std::is_same_v<X, int16_t>) corrections(p, q);
}

// sum over a group of (q - middle) * x_int16 = sum of q * x_int16 - middle * sum of x_int16:
// the tiles multiply q itself (no subtraction per weight) and add middle * scale * (sum of
// x - sum of x_int16) per group, with the bias terms. x's rounding errors then meet the
// weights centred, as in the float tiles, and mostly cancel: against q alone, always
// positive, they added up to 2e-3 of the output on 8-bit layers.
void corrections(const Problem& p, Q16Rows& q) {
  const int groups = p.K / p.group_size, stride = xsum_stride(groups), chunks = p.K / 32;
  const float middle = static_cast<float>(1 << (p.bits - 1));
  q.corrections.assign(static_cast<size_t>(p.M) * stride, 0.0f);
  for (int m = 0; m < p.M; ++m) {
    const float* x = p.x + static_cast<int64_t>(m) * p.K;
    const int16_t* values = q.values.data() + static_cast<int64_t>(m) * p.K;
    for (int g = 0; g < groups; ++g) {
      float exact = 0.0f, image = 0.0f;
      for (int k = g * p.group_size; k < (g + 1) * p.group_size; ++k) exact += x[k];
      for (int c = g * p.group_size / 32; c < (g + 1) * p.group_size / 32; ++c) {
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += values[c * 32 + i];
        image += static_cast<float>(sum) * q.scales[static_cast<size_t>(m) * chunks + c];
      }
      q.corrections[static_cast<size_t>(m) * stride + g] = middle * (exact - image);
    }
  }
}
}  // namespace

bool int8_activations() { return g_int8; }
void set_int8_activations(bool on) { g_int8 = on; }
bool int16_activations() { return g_int16; }
void set_int16_activations(bool on) { g_int16 = on; }
void quantize_q8(const Problem& p, Q8Rows& q) { quantize_rows(p, q); }
void quantize_q16(const Problem& p, Q16Rows& q) { quantize_rows(p, q); }

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

// 32 weights as two vectors of 16 int16 (q itself; see corrections()): 4-bit, the low
// nibbles then the high ones; 8-bit, in order.
template <int BITS>
MLXLAB_AVX2 inline void load32_16(const uint8_t* src, __m256i w[2]) {
  const __m256i first =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  if constexpr (BITS == 8) {
    w[0] = first;
    w[1] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16)));
  } else {
    w[0] = _mm256_and_si256(first, _mm256_set1_epi16(0x0F));
    w[1] = _mm256_srli_epi16(first, 4);
  }
}

// The dot of 32 weights with 32 int16 x as 8 float lanes: products of at most 255 x 32767,
// four to a lane, far from int32's limit.
MLXLAB_AVX2 inline __m256 dot32_16(const __m256i w[2], const int16_t* x) {
  const __m256i low = _mm256_madd_epi16(w[0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  const __m256i high =
      _mm256_madd_epi16(w[1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)));
  return _mm256_cvtepi32_ps(_mm256_add_epi32(low, high));
}

// NB columns from n, MB rows from m0, as the float tile: per chunk of 32, the integer
// dot times (x's chunk scale x the group's scale) into the accumulator.
template <int BITS, int GS, int MB, int NB, typename X>
MLXLAB_AVX2 void tile_q(const Problem& p, const Block& b, const float* xsum,
                        const QuantizedRows<X>& q, int n, int m0) {
  constexpr int kChunkBytes = 32 * BITS / 8;
  const int chunks = p.K / 32;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const X* xq = q.values.data() + static_cast<int64_t>(m0) * p.K;
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
  if constexpr (std::is_same_v<X, int16_t>) {
    add_bias_terms<MB, NB>(b, scales, q.corrections.data() + m0 * stride, stride, acc);
  }
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchTiles * NB * row_bytes);
  for (int c = 0; c < chunks; ++c) {
#pragma GCC unroll 4
    for (int line = 0; line < NB * kChunkBytes || line == 0; line += 64) {
      _mm_prefetch(ahead + c * NB * kChunkBytes + line, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const uint8_t* src = rows + j * row_bytes + c * kChunkBytes;
      const __m256 scale = _mm256_broadcast_ss(scales + j * b.groups + c * 32 / GS);
      if constexpr (std::is_same_v<X, int8_t>) {
        const __m256i w = load32<BITS>(src);
#pragma GCC unroll 8
        for (int m = 0; m < MB; ++m) {
          const __m256i x = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(xq + static_cast<int64_t>(m) * p.K + c * 32));
          const __m256 both = _mm256_mul_ps(scale, _mm256_broadcast_ss(xscales + m * chunks + c));
          acc[j][m] = _mm256_fmadd_ps(dot32<BITS>(w, x), both, acc[j][m]);
        }
      } else {
        __m256i w[2];
        load32_16<BITS>(src, w);
#pragma GCC unroll 8
        for (int m = 0; m < MB; ++m) {
          const __m256 both = _mm256_mul_ps(scale, _mm256_broadcast_ss(xscales + m * chunks + c));
          const __m256 dot = dot32_16(w, xq + static_cast<int64_t>(m) * p.K + c * 32);
          acc[j][m] = _mm256_fmadd_ps(dot, both, acc[j][m]);
        }
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

template <int BITS, int GS, int MB, int NB, typename X>
MLXLAB_AVX2 void strip_q(const Problem& p, const Block& b, const float* xsum,
                         const QuantizedRows<X>& q, int n1, int m0) {
  int n = b.n0;
  for (; n + NB <= n1; n += NB) tile_q<BITS, GS, MB, NB>(p, b, xsum, q, n, m0);
  for (; n < n1; ++n) tile_q<BITS, GS, MB, 1>(p, b, xsum, q, n, m0);
}

template <int BITS, int GS, typename X>
MLXLAB_AVX2 void rows_q(const Problem& p, const float* xsum, const QuantizedRows<X>& q, int n0,
                        int n1) {
  Block b = block_floats(p, n0, n1);
  if (BITS == 8 && std::is_same_v<X, int8_t>) {
    // The weights enter the dots as q - 128: the bias terms take the 128 x scale back.
    float* biases = const_cast<float*>(b.biases);
    for (int i = 0; i < (n1 - n0) * b.groups; ++i) biases[i] += 128.0f * b.scales[i];
  }
  int m = 0;
  for (; m + 4 <= p.M; m += 4) strip_q<BITS, GS, 4, 2>(p, b, xsum, q, n1, m);
  for (; m + 2 <= p.M; m += 2) strip_q<BITS, GS, 2, 4>(p, b, xsum, q, n1, m);
  if (m < p.M) strip_q<BITS, GS, 1, 4>(p, b, xsum, q, n1, m);
}

template <typename X>
void rows_for(const Problem& p, const float* xsum, const QuantizedRows<X>& q, int n0, int n1) {
  for_shape(p, [&](auto bits, auto gs) { rows_q<bits(), gs()>(p, xsum, q, n0, n1); });
}

}  // namespace

void rows_q8_avx2(const Problem& p, const float* xsum, const Q8Rows& q, int n0, int n1) {
  rows_for(p, xsum, q, n0, n1);
}

void rows_q16_avx2(const Problem& p, const float* xsum, const Q16Rows& q, int n0, int n1) {
  rows_for(p, xsum, q, n0, n1);
}

}  // namespace mlxlab

#else  // not x86-64: the float kernels

namespace mlxlab {
void rows_q8_avx2(const Problem& p, const float* xsum, const Q8Rows&, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
void rows_q16_avx2(const Problem& p, const float* xsum, const Q16Rows&, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
}  // namespace mlxlab

#endif
