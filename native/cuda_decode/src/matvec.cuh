// The step's matrix-vector kernels: the embedding gather, and the normed matvecs
// (q/k/v, gate/up with SwiGLU, lm_head).
#pragma once

#include "device_math.cuh"

namespace mlxlab::cuda_decode {
namespace {

template <typename T>
__global__ void embed(const T* __restrict__ table, const int32_t* __restrict__ tokens,
                      T* __restrict__ x, int hidden) {
  release_next();
  await_previous();
  const T* row = table + static_cast<size_t>(tokens[blockIdx.x]) * hidden;
  T* out = x + static_cast<size_t>(blockIdx.x) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) out[j] = row[j];
}

enum Mode { kPlain, kResidual, kSwiglu };

// The two weight rows a warp's unit reads: two neighbours (the last unit of an odd count
// reads its row twice), or for kSwiglu a gate row and its up row.
template <int MODE>
__device__ __forceinline__ int first_row(int unit) {
  return MODE == kSwiglu ? unit : 2 * unit;
}

template <int MODE>
__device__ __forceinline__ int second_row(int unit, int n_out) {
  return MODE == kSwiglu ? unit + n_out : min(2 * unit + 1, n_out - 1);
}

// A unit's outputs for `batch` (at most B) rows from its two rows' sums: each written
// (kPlain), added to the residual stream (kResidual), or SwiGLU(gate, up) (kSwiglu), rounded
// where mlx-lm's operations round.
template <typename T, int B, int MODE>
__device__ __forceinline__ void store_unit(T* out, int n_out, int unit, int batch,
                                           const float* acc0, const float* acc1) {
  const int first = first_row<MODE>(unit), second = second_row<MODE>(unit, n_out);
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (b >= batch) break;
    T* row = out + static_cast<size_t>(b) * n_out;
    if constexpr (MODE == kSwiglu) {
      const float gate = rounded<T>(acc0[b]), up = rounded<T>(acc1[b]);
      const float sigmoid = rounded<T>(1.0f / (1.0f + expf(-gate)));
      row[unit] = from_float<T>(rounded<T>(gate * sigmoid) * up);
    } else if constexpr (MODE == kResidual) {
      row[first] = from_float<T>(to_float(row[first]) + rounded<T>(acc0[b]));
      if (second != first) {
        row[second] = from_float<T>(to_float(row[second]) + rounded<T>(acc1[b]));
      }
    } else {
      row[first] = from_float<T>(acc0[b]);
      if (second != first) row[second] = from_float<T>(acc1[b]);
    }
  }
}

constexpr int kDepth = 4;

// One 16-byte chunk of two weight rows against chunk `c` of each input row.
template <typename T, int B>
__device__ __forceinline__ void accumulate(const uint4& word0, const uint4& word1, const T* in,
                                           int depth, int c, int batch, float* acc0,
                                           float* acc1) {
  float a[8], w[8];
  unpack8<T>(word0, a);
  unpack8<T>(word1, w);
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (b >= batch) break;
    float v[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(in + b * depth + c * 8), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      acc0[b] = fmaf(a[i], v[i], acc0[b]);
      acc1[b] = fmaf(w[i], v[i], acc1[b]);
    }
  }
}

// RMSNorm(x) * norm_weight for `batch` (at most B) rows of `depth` (a multiple of 8), into
// shared memory `pitch` values a row apart, as mlx-lm's fast rms_norm rounds it: x staged
// as it is, then scaled in place. Every thread of the block (WARPS warps) takes part.
template <typename T, int B, int WARPS>
__device__ void stage_normed(const T* x, const T* __restrict__ norm_weight, float eps, int depth,
                             int pitch, int batch, T* staged) {
  constexpr int kBlock = WARPS * 32;
  __shared__ float partial[WARPS][B];
  stage_rows(x, depth, pitch, batch, staged);
  const int chunks = depth / 8;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    float squares = 0.0f;
    for (int c = threadIdx.x; b < batch && c < chunks; c += kBlock) {
      float v[8];
      unpack8<T>(reinterpret_cast<const uint4*>(staged + b * pitch)[c], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) squares = fmaf(v[i], v[i], squares);
    }
    squares = warp_sum(squares);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][b] = squares;
  }
  __syncthreads();
  float normalizer[B];
#pragma unroll
  for (int b = 0; b < B; ++b) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) total += partial[i][b];
    normalizer[b] = rsqrtf(total / static_cast<float>(depth) + eps);
  }
  for (int c = threadIdx.x; c < chunks; c += kBlock) {
    float weight[8];
    unpack8<T>(reinterpret_cast<const uint4*>(norm_weight)[c], weight);
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b >= batch) break;
      uint4* at = reinterpret_cast<uint4*>(staged + b * pitch) + c;
      float v[8];
      unpack8<T>(*at, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = weight[i] * rounded<T>(v[i] * normalizer[b]);
      *at = pack8<T>(v);  // rounded as mlx-lm's product
    }
  }
  __syncthreads();
}

// Rows of `w` (n_out of them; for kSwiglu n_out gate rows then n_out up rows) times
// `batch` (at most B) input vectors of `depth`. With NORM the input is RMSNorm(x) *
// norm_weight, staged in shared memory; without, x is staged as it is where the launch gave
// the kernel room for it (`stage`). Each warp computes two rows, 16 bytes of weights a
// lane a load; every row of the batch reads the same weights once.
template <typename T, int B, int MODE, bool NORM>
__global__ void __launch_bounds__(kThreads)
    matvec(const T* __restrict__ w, const T* x, const T* __restrict__ norm_weight, float eps,
           T* out, int n_out, int depth, int batch, bool stage) {
  extern __shared__ __align__(16) unsigned char shared[];
  const int lane = threadIdx.x % 32;
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  release_next();
  {  // what the first round loads, asked of L2 while the kernel before ends
    const int unit = min(blockIdx.x * kWarps + threadIdx.x / 32, units - 1);
    const int first = first_row<MODE>(unit), second = second_row<MODE>(unit, n_out);
    const char* r0 = reinterpret_cast<const char*>(w + static_cast<size_t>(first) * depth);
    const char* r1 = reinterpret_cast<const char*>(w + static_cast<size_t>(second) * depth);
    const int bytes = min(depth * static_cast<int>(sizeof(T)), kDepth * 32 * 16);
    if (lane * 128 < bytes) {
      prefetch_line(r0 + lane * 128);
      prefetch_line(r1 + lane * 128);
    }
  }
  await_previous();
  const T* in = x;
  if constexpr (NORM) {
    stage_normed<T, B, kWarps>(x, norm_weight, eps, depth, depth, batch, reinterpret_cast<T*>(shared));
    in = reinterpret_cast<const T*>(shared);
  } else if (stage) {
    stage_rows(x, depth, depth, batch, reinterpret_cast<T*>(shared));
    in = reinterpret_cast<const T*>(shared);
  }
  // A grid of a few blocks an SM, each warp taking every (grid)th unit: the block's staged
  // input serves many rows (with 32 rows a batch it is 128 KB of shared memory).
  for (int unit = blockIdx.x * kWarps + threadIdx.x / 32; unit < units;
       unit += gridDim.x * kWarps) {
    const int first = first_row<MODE>(unit), second = second_row<MODE>(unit, n_out);
    const uint4* w0 = reinterpret_cast<const uint4*>(w + static_cast<size_t>(first) * depth);
    const uint4* w1 = reinterpret_cast<const uint4*>(w + static_cast<size_t>(second) * depth);
    float acc0[B], acc1[B];
#pragma unroll
    for (int b = 0; b < B; ++b) acc0[b] = acc1[b] = 0.0f;
    // kDepth chunks of each row a lane loaded before any is used: enough bytes in flight to
    // keep the memory busy when a matrix has few rows (a warp's 16 KB load per round).
    const int chunks = depth / 8;
    int c = lane;
    for (; c + 32 * (kDepth - 1) < chunks; c += 32 * kDepth) {
      uint4 r0[kDepth], r1[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        r0[u] = __ldg(w0 + c + 32 * u);
        r1[u] = __ldg(w1 + c + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        accumulate<T, B>(r0[u], r1[u], in, depth, c + 32 * u, batch, acc0, acc1);
      }
    }
    for (; c < chunks; c += 32) {
      accumulate<T, B>(__ldg(w0 + c), __ldg(w1 + c), in, depth, c, batch, acc0, acc1);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      acc0[b] = warp_sum(acc0[b]);
      acc1[b] = warp_sum(acc1[b]);
    }
    if (lane == 0) store_unit<T, B, MODE>(out, n_out, unit, batch, acc0, acc1);
  }
}
}  // namespace
}  // namespace mlxlab::cuda_decode
