#include "decode_math.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#if defined(__x86_64__) || defined(_M_X64)
#include "avx2_util.h"

// GCC 12's AVX-512 headers start vectors as `__Y = __Y`, which -Wall reports in every caller.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace mlxlab {

namespace {

// 8 keys' or values' elements as floats: float32 as they are, float16 widened (exact).
MLXLAB_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
MLXLAB_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
MLXLAB_AVX2 inline float load1(const float* p) { return *p; }
MLXLAB_AVX2 inline float load1(const uint16_t* p) { return _cvtsh_ss(*p); }

template <typename T>
MLXLAB_AVX2 inline float dot(const float* a, const T* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc);
  float total = horizontal_sum(acc);
  for (; i < n; ++i) total += a[i] * load1(b + i);
  return total;
}

// dot(a, b_i, n) for the four rows b + i * stride, n a multiple of 8: the same FMAs in the
// same order as dot's, four independent chains instead of one waiting on each FMA.
template <typename T>
MLXLAB_AVX2 inline void dot4(const float* a, const T* b, int64_t stride, int n, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(x, load8(b + r * stride + i), acc[r]);
  }
  for (int r = 0; r < 4; ++r) out[r] = horizontal_sum(acc[r]);
}

// y += alpha * x
template <typename T>
MLXLAB_AVX2 inline void axpy(float alpha, const T* x, float* y, int n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, load8(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * load1(x + i);
}

// exp(x) for 8 floats: range reduction by ln 2 and a degree-6 polynomial (about 1 ulp),
// as vectorized exp routines do; -inf gives 0.
MLXLAB_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.3762626647949f);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// exp8 for one value: a tail key gets the weight it would get in a vector.
MLXLAB_AVX2 inline float exp1(float x) { return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x))); }

// p[s] = exp(p[s] - max) / sum, in place. The sum runs key by key, not in vector lanes:
// then masked keys (exactly 0) change nothing wherever they sit, so a row's left padding,
// or the keys a verifying query does not see, leave its result bit for bit as alone.
MLXLAB_AVX2 void softmax(float* p, int S) {
  float top = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < S; ++s) top = std::max(top, p[s]);
  const __m256 shift = _mm256_set1_ps(top);
  int s = 0;
  for (; s + 8 <= S; s += 8) _mm256_storeu_ps(p + s, exp8(_mm256_sub_ps(_mm256_loadu_ps(p + s), shift)));
  for (; s < S; ++s) p[s] = exp1(p[s] - top);
  float total = 0.0f;
  for (s = 0; s < S; ++s) total += p[s];
  const float inverse = 1.0f / total;
  for (s = 0; s < S; ++s) p[s] *= inverse;
}

MLXLAB_AVX2 inline float masked(float score, const MaskRow& mask, int s) {
  if (mask.kind == 1) {
    const bool keep = static_cast<const bool*>(mask.data)[s * mask.seq];
    return keep ? score : -std::numeric_limits<float>::infinity();
  }
  if (mask.kind == 2) return score + static_cast<const float*>(mask.data)[s * mask.seq];
  return score;
}

}  // namespace

MLXLAB_AVX2 void rms_norm(const float* x, const float* weight, int D, float eps, float* out) {
  const float mean = dot(x, x, D) / static_cast<float>(D);
  const float factor = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < D; ++i) out[i] = (x[i] * factor) * weight[i];
}

void rope(float* heads, int n_heads, int head_dim, float position, const Rope& r) {
  const int dims = r.dims > 0 ? r.dims : head_dim, half = dims / 2;
  const float step = std::log(r.base) / static_cast<float>(half);
  const float at = position * r.scale;
  if (r.mscale != 1.0f) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = heads + static_cast<int64_t>(h) * head_dim;
      for (int d = 0; d < dims; ++d) v[d] *= r.mscale;
    }
  }
  for (int i = 0; i < half; ++i) {
    const float theta = r.inv_freqs ? at * r.inv_freqs[i] : at * std::exp(-static_cast<float>(i) * step);
    const float c = std::cos(theta), s = std::sin(theta);
    // Traditional RoPE rotates neighbouring pairs; the other kind, the two halves.
    const int a = r.traditional ? 2 * i : i, b = r.traditional ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = heads + static_cast<int64_t>(h) * head_dim;
      const float x1 = v[a], x2 = v[b];
      v[a] = x1 * c - x2 * s;
      v[b] = x1 * s + x2 * c;
    }
  }
}

// out = sum over s of p[s] * values[s], key by key as axpy would add them (the same FMAs,
// so the same bits), with out held in registers: 8 vectors, a 64-wide head.
template <typename T>
MLXLAB_AVX2 void weighted_sum64(const float* p, int S, const T* values, int64_t value_seq,
                                float* out) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int s = 0; s < S; ++s) {
    const __m256 weight = _mm256_set1_ps(p[s]);
    const T* v = values + s * value_seq;
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(weight, load8(v + 8 * j), acc[j]);
  }
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

#define MLXLAB_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

MLXLAB_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
MLXLAB_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// A 64-wide head on AVX-512: a key's dot product is four FMAs into one vector and a reduce,
// four keys at a time; the weighted sum of the values keeps `out` in four registers.
template <typename T>
MLXLAB_AVX512 void attend64_avx512(const float* q, int S, const T* keys, int64_t key_seq,
                                   const T* values, int64_t value_seq, const MaskRow& mask,
                                   float scale, float* out, float* scores) {
  const __m512 factor = _mm512_set1_ps(scale);
  __m512 query[4];
  for (int j = 0; j < 4; ++j) query[j] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * j), factor);
  int s = 0;
  for (; s + 4 <= S; s += 4) {
    __m512 acc[4];
    for (int r = 0; r < 4; ++r) {
      const T* k = keys + (s + r) * key_seq;
      acc[r] = _mm512_mul_ps(query[0], load16(k));
      for (int j = 1; j < 4; ++j) acc[r] = _mm512_fmadd_ps(query[j], load16(k + 16 * j), acc[r]);
    }
    for (int r = 0; r < 4; ++r) scores[s + r] = _mm512_reduce_add_ps(acc[r]);
  }
  for (; s < S; ++s) {
    const T* k = keys + s * key_seq;
    __m512 acc = _mm512_mul_ps(query[0], load16(k));
    for (int j = 1; j < 4; ++j) acc = _mm512_fmadd_ps(query[j], load16(k + 16 * j), acc);
    scores[s] = _mm512_reduce_add_ps(acc);
  }
  for (s = 0; s < S; ++s) scores[s] = masked(scores[s], mask, s);
  softmax(scores, S);
  __m512 acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
  for (s = 0; s < S; ++s) {
    const __m512 weight = _mm512_set1_ps(scores[s]);
    const T* v = values + s * value_seq;
    for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(weight, load16(v + 16 * j), acc[j]);
  }
  for (int j = 0; j < 4; ++j) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

template <typename T>
MLXLAB_AVX2 void attend_as(const float* q, int head_dim, int S, const T* keys, int64_t key_seq,
                           const T* values, int64_t value_seq, const MaskRow& mask, float scale,
                           float* out) {
  thread_local std::vector<float> scores, scaled;
  scores.resize(S);
  scaled.resize(head_dim);
  if (head_dim == 64 && avx512_allowed() && avx512_supported()) {
    attend64_avx512(q, S, keys, key_seq, values, value_seq, mask, scale, out, scores.data());
    return;
  }
  // MLX scales the query first, then takes the dot products.
  for (int d = 0; d < head_dim; ++d) scaled[d] = q[d] * scale;
  int s = 0;
  if (head_dim % 8 == 0) {
    for (; s + 4 <= S; s += 4) dot4(scaled.data(), keys + s * key_seq, key_seq, head_dim, &scores[s]);
  }
  for (; s < S; ++s) scores[s] = dot(scaled.data(), keys + s * key_seq, head_dim);
  for (s = 0; s < S; ++s) scores[s] = masked(scores[s], mask, s);
  softmax(scores.data(), S);
  if (head_dim == 64) {
    weighted_sum64(scores.data(), S, values, value_seq, out);
    return;
  }
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int s = 0; s < S; ++s) axpy(scores[s], values + s * value_seq, out, head_dim);
}

void attend(const float* q, int head_dim, int S, const KVRow& keys, const KVRow& values,
            const MaskRow& mask, float scale, float* out) {
  if (keys.half) {
    attend_as(q, head_dim, S, static_cast<const uint16_t*>(keys.data), keys.seq,
              static_cast<const uint16_t*>(values.data), values.seq, mask, scale, out);
  } else {
    attend_as(q, head_dim, S, static_cast<const float*>(keys.data), keys.seq,
              static_cast<const float*>(values.data), values.seq, mask, scale, out);
  }
}

// gate * sigmoid(k * u(gate)) * up: SiLU with u(g) = g and k = 1; GELU's tanh
// approximation with u(g) = g + 0.044715 g^3 and k = 2 sqrt(2 / pi), since
// 0.5 (1 + tanh(y)) is sigmoid(2y).
template <bool Tanh>
MLXLAB_AVX2 void sigmoid_gated(float* gate, const float* up, int n) {
  constexpr float k = Tanh ? 1.5957691216057308f : 1.0f, cube = 0.044715f;
  const __m256 one = _mm256_set1_ps(1.0f), minus_k = _mm256_set1_ps(-k), c = _mm256_set1_ps(cube);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 u = Tanh ? _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g) : g;
    const __m256 sigmoid = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_k, u))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i], u = Tanh ? g + cube * g * g * g : g;
    gate[i] = g * (1.0f / (1.0f + exp1(-k * u))) * up[i];
  }
}

MLXLAB_AVX2 void gated(float* gate, const float* up, int n, int activation) {
  if (activation == 0) return sigmoid_gated<false>(gate, up, n);
  if (activation == 1) return sigmoid_gated<true>(gate, up, n);
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + std::erf(g * 0.7071067811865476f)) * up[i];
  }
}

MLXLAB_AVX2 void add_into(float* a, const float* b, int n) {
  for (int i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace mlxlab

#else  // not x86-64: the fused layers are never turned on (kernel_name() is not "avx2")

namespace mlxlab {
namespace {
[[noreturn]] void unsupported() { throw std::runtime_error("decode layer: x86-64 AVX2 only"); }
}  // namespace
void rms_norm(const float*, const float*, int, float, float*) { unsupported(); }
void rope(float*, int, int, float, const Rope&) { unsupported(); }
void attend(const float*, int, int, const KVRow&, const KVRow&, const MaskRow&, float, float*) {
  unsupported();
}
void gated(float*, const float*, int, int) { unsupported(); }
void add_into(float*, const float*, int) { unsupported(); }
}  // namespace mlxlab

#endif
