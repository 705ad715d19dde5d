// y = x @ dequantize(w).T for MLX's affine quantization, on float32 rows.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

namespace mlxlab {

enum class ScaleType { Float32, Float16, BFloat16 };

// One call: x is M x K float32 (row-major), w is N rows of K * bits / 8 bytes
// (mx.quantize's uint32 packing read as bytes: little-endian, low bits first),
// scales and biases are N x (K / group_size) of scale_type, y is M x N float32.
struct Problem {
  const float* x;
  const uint8_t* w;
  const void* scales;
  const void* biases;
  ScaleType scale_type;
  float* y;
  int M, N, K, group_size, bits;
};

// The rows at and above which the dequantize-then-sgemm path runs (0: never).
int blas_min_rows();
void set_blas_min_rows(int rows);
// Whether an optimized cblas_sgemm (OpenBLAS) was found in the process.
bool blas_found();
int thread_count();
void set_thread_count(int threads);
// Weights x rows below which a call stays on one thread (MLXLAB_QMM_PARALLEL_MIN).
int64_t parallel_min_work();
void set_parallel_min_work(int64_t work);
// "avx512", "avx2" or "scalar": the kernel this CPU runs.
const char* kernel_name();
// Whether decode rows may use the AVX-512 tiles where the CPU has them (MLXLAB_QMM_AVX512,
// default 1; 0 keeps the AVX2 tiles, to compare).
bool avx512_allowed();
void set_avx512_allowed(bool on);

// Throws std::invalid_argument for shapes or bits it does not support.
void compute(const Problem& p);
// Every problem, their output columns shared among the threads in one loop (a mixture's
// experts: a few rows each, one wake-up for all); those of many rows on the sgemm path.
void compute_many(const Problem* problems, int count);

// Calls f(bits, group_size) with the problem's two as std::integral_constant, so that each
// supported pair gets its own fully unrolled kernel: f(auto bits, auto gs) names it
// kernel<bits(), gs()>. (compute() has checked the pair.)
template <typename F>
void for_shape(const Problem& p, F&& f) {
  using std::integral_constant;
  switch (p.bits * 1000 + p.group_size) {
    case 4032: f(integral_constant<int, 4>{}, integral_constant<int, 32>{}); break;
    case 4064: f(integral_constant<int, 4>{}, integral_constant<int, 64>{}); break;
    case 4128: f(integral_constant<int, 4>{}, integral_constant<int, 128>{}); break;
    case 8032: f(integral_constant<int, 8>{}, integral_constant<int, 32>{}); break;
    case 8064: f(integral_constant<int, 8>{}, integral_constant<int, 64>{}); break;
    default: f(integral_constant<int, 8>{}, integral_constant<int, 128>{}); break;
  }
}

// The rows of group sums of x (xsum) the kernels take: groups rounded up to 8 and
// zero padded, so a kernel reads 8 groups per vector load.
inline int xsum_stride(int groups) { return (groups + 7) & ~7; }

// The per-CPU kernels (kernels_avx2.cpp is compiled for AVX2/FMA/F16C).
float scale_at(const void* data, ScaleType type, int64_t index);
void rows_scalar(const Problem& p, const float* xsum, int n0, int n1);
void dequantize_scalar(const Problem& p, int n0, int n1, float* out);
bool avx2_supported();

// The integer-activation variants (decode rows on an AVX2 CPU): x per 32 values as int8
// or int16 and a float scale, 4-bit values in unpacking order (evens, then odds).
// int8 (opt-in, MLXLAB_QMM_INT8=1): llama.cpp's trick, about 1% of a product off.
// int16 (MLXLAB_QMM_INT16): about 2e-5 of the largest output off.
template <typename X>
struct QuantizedRows {
  std::vector<X> values;      // M x K
  std::vector<float> scales;  // M x K / 32
  // int16: per row and group (M x xsum_stride), the middle of the weights' range times
  // (the sum of x minus the sum of its int16 image): the tiles add it times each scale.
  std::vector<float> corrections;
};
using Q8Rows = QuantizedRows<int8_t>;
using Q16Rows = QuantizedRows<int16_t>;
bool int8_activations();
void set_int8_activations(bool on);
bool int16_activations();
void set_int16_activations(bool on);
void quantize_q8(const Problem& p, Q8Rows& q);
void quantize_q16(const Problem& p, Q16Rows& q);
void rows_q8_avx2(const Problem& p, const float* xsum, const Q8Rows& q, int n0, int n1);
void rows_q16_avx2(const Problem& p, const float* xsum, const Q16Rows& q, int n0, int n1);
// The AVX2 and AVX-512 tiles (kernels_avx512.cpp) take x in the order their 4-bit weights
// unpack: each run of 16 (AVX2) or 32 (AVX-512) values as its even ones, then its odd ones
// (a buffer of `out`); x itself for 8 bits.
const float* x_in_nibble_order(const Problem& p, int run, std::vector<float>& out);
void rows_avx2(const Problem& p, const float* x, const float* xsum, int n0, int n1);
bool avx512_supported();
void rows_avx512(const Problem& p, const float* x, const float* xsum, int n0, int n1);
void dequantize_avx2(const Problem& p, int n0, int n1, float* out);

}  // namespace mlxlab
