// The AVX2/FMA kernels, compiled for those instructions function by function so the
// library still loads (and runs the scalar kernels) on a CPU without them.
#include <cstring>

#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include "avx2_util.h"

namespace mlxlab {

namespace {

// 8 quantized values as floats. 8-bit: zero-extend and convert. 4-bit: the 8 values
// of one little-endian 32-bit word, broadcast and shifted lane by lane (value i sits at
// bit 4i), so there is no byte shuffle: Zen's shuffle pipes are the scarce ones.
template <int BITS>
MLXLAB_AVX2 inline __m256 load8(const uint8_t* src) {
  if constexpr (BITS == 8) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  } else {
    int32_t word;
    std::memcpy(&word, src, 4);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m256i values = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
    return _mm256_cvtepi32_ps(_mm256_and_si256(values, _mm256_set1_epi32(0xF)));
  }
}

// 32 quantized values (one chunk) as 4 x 8 floats, in order (for dequantizing).
template <int BITS>
MLXLAB_AVX2 inline void unpack32(const uint8_t* src, __m256 out[4]) {
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) out[i] = load8<BITS>(src + i * BITS);
}

// The same chunk in the order x_in_nibble_order(p, 16, ...) gives x: for 4 bits, each 8 bytes zero-extended
// to 8 lanes give 8 even values (low nibbles) and 8 odd ones (high nibbles), two
// operations each (x in nibble order, runs of 16). On a Zen 1 guest, where 256-bit operations issue as two halves, this
// ran 1.6x the broadcast-and-shift unpacking above (5.6 against 3.5 weights/ns).
template <int BITS>
MLXLAB_AVX2 inline void unpack32_tile(const uint8_t* src, __m256 out[4]) {
  if constexpr (BITS == 8) {
    unpack32<8>(src, out);
  } else {
    const __m256i low = _mm256_set1_epi32(0xF);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i bytes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * h)));
      out[2 * h] = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, low));
      out[2 * h + 1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
    }
  }
}

// NB output columns from n, MB rows of x from m0, NB x MB accumulators in registers
// (every loop over j and m is unrolled, so acc never goes to the stack). Per chunk of
// 32 weights of a column: unpack once, then per row a 4-FMA dot folded into the
// accumulator with the group's scale: one FMA, and no more registers for groups of
// 64 or 128.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void tile(const Problem& p, const float* x_in, const Block& b, const float* xsum,
                      int n, int m0) {
  constexpr int kGroupBytes = GS * BITS / 8;
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const float* x = x_in + static_cast<int64_t>(m0) * p.K;
  const float* scales = b.scales + static_cast<int64_t>(n - b.n0) * b.groups;
  __m256 acc[NB][MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) acc[j][m] = _mm256_setzero_ps();
  }
  const int stride = xsum_stride(b.groups);
  add_bias_terms<MB, NB>(b, b.biases + (scales - b.scales), xsum + m0 * stride, stride, acc);
  // Weights stream from DRAM (a token's are several times L3) and the hardware
  // prefetcher keeps too few of NB interleaved rows in flight: each group prefetches
  // its share of the tile kPrefetchTiles ahead (NB rows are contiguous), no branch.
  const char* ahead = reinterpret_cast<const char*>(rows + kPrefetchTiles * NB * row_bytes);
  // Row starts computed once: in the loop they cost a multiply per use (callgrind).
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
        __m256 w[4];
        unpack32_tile<BITS>(wrow[j] + g * kGroupBytes + c * BITS / 8, w);
        const __m256 scale = _mm256_broadcast_ss(scales + j * b.groups + g);
#pragma GCC unroll 8
        for (int m = 0; m < MB; ++m) {
          const float* xm = xrow[m] + g * GS + c;
          __m256 dot = _mm256_mul_ps(w[0], _mm256_loadu_ps(xm));
          dot = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xm + 8), dot);
          dot = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xm + 16), dot);
          dot = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xm + 24), dot);
          acc[j][m] = _mm256_fmadd_ps(dot, scale, acc[j][m]);
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

// Rows m0.. (MB of them) for the block's columns: NB at a time, then one by one.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void strip(const Problem& p, const float* x, const Block& b, const float* xsum,
                       int n1, int m0) {
  int n = b.n0;
  for (; n + NB <= n1; n += NB) tile<BITS, GS, MB, NB>(p, x, b, xsum, n, m0);
  for (; n < n1; ++n) tile<BITS, GS, MB, 1>(p, x, b, xsum, n, m0);
}

template <int BITS, int GS>
MLXLAB_AVX2 void rows(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  const Block b = block_floats(p, n0, n1);
  // The caller's column block is small (16 columns), so its weights stay in L1 while
  // every strip of rows passes over them. NB x MB stays at 4 to 8 accumulators: enough
  // chains to hide the FMA latency, few enough to leave registers for the weights.
  int m = 0;
  for (; m + 8 <= p.M; m += 8) strip<BITS, GS, 8, 1>(p, x, b, xsum, n1, m);
  for (; m + 4 <= p.M; m += 4) strip<BITS, GS, 4, 2>(p, x, b, xsum, n1, m);
  switch (p.M - m) {
    case 3: strip<BITS, GS, 3, 2>(p, x, b, xsum, n1, m); break;
    case 2: strip<BITS, GS, 2, 4>(p, x, b, xsum, n1, m); break;
    case 1: strip<BITS, GS, 1, 4>(p, x, b, xsum, n1, m); break;
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

void rows_avx2(const Problem& p, const float* x, const float* xsum, int n0, int n1) {
  for_shape(p, [&](auto bits, auto gs) { rows<bits(), gs()>(p, x, xsum, n0, n1); });
}

void dequantize_avx2(const Problem& p, int n0, int n1, float* out) {
  p.bits == 8 ? dequantize<8>(p, n0, n1, out) : dequantize<4>(p, n0, n1, out);
}

}  // namespace mlxlab

#else  // not x86-64: the scalar kernels only

namespace mlxlab {
bool avx2_supported() { return false; }
void rows_avx2(const Problem& p, const float*, const float* xsum, int n0, int n1) {
  rows_scalar(p, xsum, n0, n1);
}
void dequantize_avx2(const Problem& p, int n0, int n1, float* out) {
  dequantize_scalar(p, n0, n1, out);
}
}  // namespace mlxlab

#endif
