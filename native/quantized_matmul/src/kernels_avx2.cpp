// The AVX2/FMA kernels, compiled for those instructions function by function so the
// library still loads (and runs the scalar kernels) on a CPU without them.
#include <cstring>
#include <vector>

#include "kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define MLXLAB_AVX2 __attribute__((target("avx2,fma,f16c")))

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

// 32 quantized values (one chunk) as 4 x 8 floats, in order.
template <int BITS>
MLXLAB_AVX2 inline void unpack32(const uint8_t* src, __m256 out[4]) {
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) out[i] = load8<BITS>(src + i * BITS);
}

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

// `count` scales (or biases) from `start` as floats, zero padded to `padded`: 8 halves
// per F16C instruction, so the tiles' inner loops only broadcast floats from memory.
MLXLAB_AVX2 void to_floats(const void* data, ScaleType type, int64_t start, int count,
                           int padded, float* out) {
  int g = 0;
  if (type == ScaleType::Float32) {
    std::memcpy(out, static_cast<const float*>(data) + start, sizeof(float) * count);
    g = count;
  }
  const uint16_t* src = static_cast<const uint16_t*>(data) + start;
  for (; g + 8 <= count; g += 8) {
    __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + g));
    __m256 floats = type == ScaleType::Float16
                        ? _mm256_cvtph_ps(halves)
                        : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
    _mm256_storeu_ps(out + g, floats);
  }
  for (; g < count; ++g) out[g] = load_scale(data, type, start + g);
  for (; g < padded; ++g) out[g] = 0.0f;
}

// How far ahead the tiles prefetch weights; 2 to 8 measured alike (noisy, shared VM).
constexpr int kPrefetchTiles = 4;

// A block of columns' scales and biases as floats, one padded row of groups each.
struct Block {
  const float* scales;
  const float* biases;
  int stride;  // groups rounded up to 8, as the rows of xsum
  int n0;      // the block's first column
};

// NB output columns from n, MB rows of x from m0, NB x MB accumulators in registers.
// Per chunk of 32 weights of a column: unpack once, then per row a 4-FMA dot folded
// into the accumulator with the group's scale (one FMA; every chunk of a group takes
// its scale, so group sizes 64 and 128 need no more registers). The bias terms
// (bias x the group's sum of x) go into the same accumulators, 8 groups per FMA.
template <int BITS, int GS, int MB, int NB>
MLXLAB_AVX2 void tile(const Problem& p, const Block& b, const float* xsum, int n, int m0) {
  const int64_t row_bytes = static_cast<int64_t>(p.K) * BITS / 8;
  const uint8_t* rows = p.w + static_cast<int64_t>(n) * row_bytes;
  const float* x = p.x + static_cast<int64_t>(m0) * p.K;
  const float* scales = b.scales + static_cast<int64_t>(n - b.n0) * b.stride;
  const float* biases = b.biases + static_cast<int64_t>(n - b.n0) * b.stride;
  // Every loop over j and m is unrolled, so acc lives in registers, not on the stack.
  __m256 acc[NB][MB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 8
    for (int m = 0; m < MB; ++m) acc[j][m] = _mm256_setzero_ps();
  }
  for (int g = 0; g < b.stride; g += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __m256 bias = _mm256_loadu_ps(biases + j * b.stride + g);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const __m256 sums = _mm256_loadu_ps(xsum + (m0 + m) * b.stride + g);
        acc[j][m] = _mm256_fmadd_ps(bias, sums, acc[j][m]);
      }
    }
  }
  for (int k = 0; k < p.K; k += 32) {
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const uint8_t* src = rows + j * row_bytes + k * BITS / 8;
      // Weights stream from DRAM (a token's are several times L3) and the hardware
      // prefetcher keeps too few of NB interleaved rows in flight: fetch the same spot
      // kPrefetchTiles tiles ahead, one line per 64 bytes (1.3-2x on the 8-bit layer).
      if ((k * BITS / 8) % 64 == 0) {
        const uint8_t* ahead = src + kPrefetchTiles * NB * row_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      }
      __m256 w[4];
      unpack32<BITS>(src, w);
      const __m256 scale = _mm256_broadcast_ss(scales + j * b.stride + k / GS);
#pragma GCC unroll 8
      for (int m = 0; m < MB; ++m) {
        const float* xk = x + static_cast<int64_t>(m) * p.K + k;
        __m256 dot = _mm256_mul_ps(w[0], _mm256_loadu_ps(xk));
        dot = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xk + 8), dot);
        dot = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xk + 16), dot);
        dot = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xk + 24), dot);
        acc[j][m] = _mm256_fmadd_ps(dot, scale, acc[j][m]);
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
MLXLAB_AVX2 void strip(const Problem& p, const Block& b, const float* xsum, int n1, int m0) {
  int n = b.n0;
  for (; n + NB <= n1; n += NB) tile<BITS, GS, MB, NB>(p, b, xsum, n, m0);
  for (; n < n1; ++n) tile<BITS, GS, MB, 1>(p, b, xsum, n, m0);
}

template <int BITS, int GS>
MLXLAB_AVX2 void rows(const Problem& p, const float* xsum, int n0, int n1) {
  const int groups = p.K / GS, stride = xsum_stride(groups), columns = n1 - n0;
  thread_local std::vector<float> floats;
  floats.resize(2 * static_cast<size_t>(columns) * stride);
  float* scales = floats.data();
  float* biases = scales + static_cast<size_t>(columns) * stride;
  for (int n = n0; n < n1; ++n) {
    const int64_t start = static_cast<int64_t>(n) * groups;
    to_floats(p.scales, p.scale_type, start, groups, stride, scales + (n - n0) * stride);
    to_floats(p.biases, p.scale_type, start, groups, stride, biases + (n - n0) * stride);
  }
  const Block b{scales, biases, stride, n0};
  // The caller's column block is small (16 columns), so its weights stay in L1 while
  // every strip of rows passes over them. NB x MB stays at 4 to 8 accumulators: enough
  // chains to hide the FMA latency, few enough to leave registers for the weights.
  int m = 0;
  for (; m + 4 <= p.M; m += 4) strip<BITS, GS, 4, 2>(p, b, xsum, n1, m);
  switch (p.M - m) {
    case 3: strip<BITS, GS, 3, 2>(p, b, xsum, n1, m); break;
    case 2: strip<BITS, GS, 2, 4>(p, b, xsum, n1, m); break;
    case 1: strip<BITS, GS, 1, 4>(p, b, xsum, n1, m); break;
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
