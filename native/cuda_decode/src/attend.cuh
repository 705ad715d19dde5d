// The step's attention kernel: RoPE, the cache write and softmax(q k) v for one token.
#pragma once

#include <cmath>

#include "device_math.cuh"

namespace mlxlab::cuda_decode {
namespace {

struct AttentionArgs {
  int heads, kv_heads, capacity, column;
  const int32_t* column_at;  // where not null, the column in device memory (at_column())
  bool traditional;
  float scale, rope_scale, log2_base;
  const void* q_norm;  // the layer's head norms (Layer::q_norm), or null
  const void* k_norm;
  float qk_eps;
  const void* qkv_bias;  // the layer's q/k/v biases (Layer::qkv_bias), or null
};

// Element i of a projected head (`at` in the fused q/k/v row) plus its bias where the layer
// has one, rounded as mlx-lm's biased projection rounds its output.
template <typename T>
__device__ __forceinline__ float projected(const T* row, const AttentionArgs& a, int at) {
  const float value = to_float(row[at]);
  if (a.qkv_bias == nullptr) return value;
  return rounded<T>(value + to_float(static_cast<const T*>(a.qkv_bias)[at]));
}

// Each thread below D: its element of a query head and of a key head, each RMS-normed over
// its head where the layer has head norms (Qwen3's), rounded as mlx-lm's fast rms_norm
// rounds (x scaled and rounded, then times the weight, rounded). Every thread takes part.
template <typename T, int D>
__device__ void head_norms(const T* row, int q_at, int k_at, const AttentionArgs& a,
                           float* q_out, float* k_out) {
  __shared__ float partial[2][kAttentionThreads / 32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float q = tid < D ? projected(row, a, q_at + tid) : 0.0f;
  const float k = tid < D ? projected(row, a, k_at + tid) : 0.0f;
  const float q_squares = warp_sum(q * q), k_squares = warp_sum(k * k);
  if (lane == 0) {
    partial[0][warp] = q_squares;
    partial[1][warp] = k_squares;
  }
  __syncthreads();
  float q_total = 0.0f, k_total = 0.0f;
#pragma unroll
  for (int i = 0; i < kAttentionThreads / 32; ++i) {
    q_total += partial[0][i];
    k_total += partial[1][i];
  }
  if (tid < D) {
    const float q_scale = rsqrtf(q_total / D + a.qk_eps), k_scale = rsqrtf(k_total / D + a.qk_eps);
    const float q_weight = to_float(static_cast<const T*>(a.q_norm)[tid]);
    const float k_weight = to_float(static_cast<const T*>(a.k_norm)[tid]);
    q_out[tid] = rounded<T>(q_weight * rounded<T>(q * q_scale));
    k_out[tid] = rounded<T>(k_weight * rounded<T>(k * k_scale));
  }
  __syncthreads();
}

// The block's query head of row blockIdx.y after RoPE, scaled, into q; its kv head's new key
// (after RoPE) and value into new_key and new_value, which the group's first query head
// also writes into the cache at the step's column. Returns where the row's kv head starts
// in the cache.
template <typename T, int D>
__device__ size_t prepare(const T* __restrict__ qkv, T* keys, T* values,
                          const int32_t* __restrict__ positions,
                          const float* __restrict__ rope_freqs, const AttentionArgs& a, float* q,
                          T* new_key, T* new_value) {
  constexpr int kHalf = D / 2;
  const int head = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int group = a.heads / a.kv_heads, kv = head / group;
  const T* row = qkv + static_cast<size_t>(b) * (a.heads + 2 * a.kv_heads) * D;
  const int q_at = head * D, k_at = (a.heads + kv) * D, v_at = (a.heads + a.kv_heads + kv) * D;
  // Where the layer norms its heads, the normed query into q (each thread then turns its
  // own pair in place) and the normed key into k_normed.
  __shared__ float k_normed[D];
  const bool normed = a.q_norm != nullptr;
  if (normed) head_norms<T, D>(row, q_at, k_at, a, q, k_normed);
  if (tid < kHalf) {
    const int i1 = a.traditional ? 2 * tid : tid;
    const int i2 = a.traditional ? 2 * tid + 1 : tid + kHalf;
    // The angle as MLX's RoPE kernel forms it.
    const float inv_freq = rope_freqs != nullptr
                               ? 1.0f / rope_freqs[tid]
                               : exp2f(-(static_cast<float>(tid) / kHalf) * a.log2_base);
    const float theta = a.rope_scale * static_cast<float>(positions[b]) * inv_freq;
    const float c = cosf(theta), s = sinf(theta);
    float x1 = normed ? q[i1] : projected(row, a, q_at + i1);
    float x2 = normed ? q[i2] : projected(row, a, q_at + i2);
    q[i1] = a.scale * rounded<T>(x1 * c - x2 * s);
    q[i2] = a.scale * rounded<T>(x1 * s + x2 * c);
    x1 = normed ? k_normed[i1] : projected(row, a, k_at + i1);
    x2 = normed ? k_normed[i2] : projected(row, a, k_at + i2);
    new_key[i1] = from_float<T>(x1 * c - x2 * s);
    new_key[i2] = from_float<T>(x1 * s + x2 * c);
  }
  if (tid < D) new_value[tid] = from_float<T>(projected(row, a, v_at + tid));
  __syncthreads();
  const size_t base = (static_cast<size_t>(b) * a.kv_heads + kv) * a.capacity * D;
  if (head % group == 0 && tid < D) {
    keys[base + static_cast<size_t>(a.column) * D + tid] = new_key[tid];
    values[base + static_cast<size_t>(a.column) * D + tid] = new_value[tid];
  }
  return base;
}

// The step's column: a replayed graph's kernels read it from device memory, since the graph
// is not rebuilt when it moves on (Replay in step.cpp). After await_previous(), as the slot
// is written by a kernel before the step's.
__device__ __forceinline__ AttentionArgs at_column(AttentionArgs a) {
  if (a.column_at != nullptr) a.column = *a.column_at;
  return a;
}

// q (floats) times one cached key (D values of T, 16-byte aligned), summed in order.
template <typename T, int D>
__device__ __forceinline__ float dot(const float* q, const uint4* key) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    float k8[8];
    unpack8<T>(key[j], k8);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum = fmaf(q[j * 8 + i], k8[i], sum);
  }
  return sum;
}

// One query head of one row: RoPE on its query and on its kv head's new key (the first
// query head of the group writes the key and value into the cache), then softmax(q k) v
// over the row's columns, online, each thread over every 128th column.
template <typename T, int D>
__global__ void __launch_bounds__(kAttentionThreads)
    attend(const T* __restrict__ qkv, T* keys, T* values, T* __restrict__ out,
           const int32_t* __restrict__ positions, const int32_t* __restrict__ first_columns,
           const float* __restrict__ rope_freqs, AttentionArgs args) {
  release_next();
  await_previous();
  const AttentionArgs a = at_column(args);
  const int head = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  __shared__ float q[D];
  __shared__ __align__(16) T new_key[D];
  __shared__ __align__(16) T new_value[D];
  const size_t base =
      prepare<T, D>(qkv, keys, values, positions, rope_freqs, a, q, new_key, new_value);
  float m = -INFINITY, l = 0.0f, acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int col = first_columns[b] + tid; col <= a.column; col += kAttentionThreads) {
    const bool fresh = col == a.column;  // its key and value are not in the cache yet here
    const uint4* kp = reinterpret_cast<const uint4*>(
        fresh ? new_key : keys + base + static_cast<size_t>(col) * D);
    const uint4* vp = reinterpret_cast<const uint4*>(
        fresh ? new_value : values + base + static_cast<size_t>(col) * D);
    const float score = dot<T, D>(q, kp);
    const float top = fmaxf(m, score);
    const float correction = expf(m - top), p = expf(score - top);
    l = l * correction + p;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float v8[8];
      unpack8<T>(vp[j], v8);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[j * 8 + i] = fmaf(p, v8[i], acc[j * 8 + i] * correction);
    }
    m = top;
  }
  // Combine the threads' partial softmaxes.
  __shared__ float warp_top[kAttentionThreads / 32];
  __shared__ float sums[kAttentionThreads / 32][D + 1];
  const int warp = tid / 32, lane = tid % 32;
  float top = warp_max(m);
  if (lane == 0) warp_top[warp] = top;
  __syncthreads();
  top = warp_top[0];
#pragma unroll
  for (int i = 1; i < kAttentionThreads / 32; ++i) top = fmaxf(top, warp_top[i]);
  const float weight = l > 0.0f ? expf(m - top) : 0.0f;
  const float total = warp_sum(l * weight);
  if (lane == 0) sums[warp][D] = total;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const float part = warp_sum(acc[d] * weight);
    if (lane == 0) sums[warp][d] = part;
  }
  __syncthreads();
  if (tid < D) {
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int i = 0; i < kAttentionThreads / 32; ++i) {
      num += sums[i][tid];
      den += sums[i][D];
    }
    out[(static_cast<size_t>(b) * a.heads + head) * D + tid] = from_float<T>(num / den);
  }
}

// As attend(), for batches of many rows: the columns in chunks of 128, each thread scoring
// one column of a chunk, then each warp summing every fourth column's values (online softmax
// across chunks). At 32 rows on an H200 it took 17.6 us a layer where attend() took 28; at 1
// and 8 rows attend() led by about 3 us ("cuBLAS for the matmuls" in docs/BENCHMARKS.md's
// history: git show 02df74b:docs/BENCHMARKS.md).
template <typename T, int D>
__global__ void __launch_bounds__(kAttentionThreads)
    attend_chunked(const T* __restrict__ qkv, T* keys, T* values, T* __restrict__ out,
           const int32_t* __restrict__ positions, const int32_t* __restrict__ first_columns,
           const float* __restrict__ rope_freqs, AttentionArgs args) {
  release_next();
  await_previous();
  const AttentionArgs a = at_column(args);
  const int head = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  __shared__ float q[D];
  __shared__ __align__(16) T new_key[D];
  __shared__ __align__(16) T new_value[D];
  const size_t base =
      prepare<T, D>(qkv, keys, values, positions, rope_freqs, a, q, new_key, new_value);
  // The columns in chunks of one a thread: each thread scores its column into shared
  // memory, then each warp takes every fourth column's values, a lane over D / 32 of its
  // values, so that a warp reads a column's values as one coalesced line. (Each thread
  // holding a whole head's sums, with 64 warp reductions at the end, took 28 us a layer at
  // 32 rows: "cuBLAS for the matmuls" in docs/BENCHMARKS.md's history,
  // git show 02df74b:docs/BENCHMARKS.md.)
  constexpr int kWarpCount = kAttentionThreads / 32, kPerLane = D / 32;
  __shared__ float p[kAttentionThreads];
  __shared__ float reduced[kWarpCount];
  __shared__ float parts[kWarpCount][D];
  const int warp = tid / 32, lane = tid % 32;
  float m = -INFINITY, l = 0.0f, acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.0f;
  for (int start = first_columns[b]; start <= a.column; start += kAttentionThreads) {
    const int col = start + tid;
    float score = -INFINITY;
    if (col <= a.column) {
      const bool fresh = col == a.column;  // its key is not in the cache yet here
      const uint4* kp = reinterpret_cast<const uint4*>(
          fresh ? new_key : keys + base + static_cast<size_t>(col) * D);
      score = dot<T, D>(q, kp);
    }
    float top = warp_max(score);
    if (lane == 0) reduced[warp] = top;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kWarpCount; ++i) top = fmaxf(top, reduced[i]);
    const float m_next = fmaxf(m, top);
    const float correction = expf(m - m_next);  // 0 on the first chunk
    const float e = col <= a.column ? expf(score - m_next) : 0.0f;
    p[tid] = e;
    float sum = warp_sum(e);
    __syncthreads();  // every warp has read the maxima
    if (lane == 0) reduced[warp] = sum;
    __syncthreads();
    sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarpCount; ++i) sum += reduced[i];
    l = l * correction + sum;
    m = m_next;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) acc[k] *= correction;
    const int count = min(kAttentionThreads, a.column - start + 1);
#pragma unroll 4
    for (int i = warp; i < count; i += kWarpCount) {
      const int c = start + i;
      const T* v = (c == a.column ? new_value : values + base + static_cast<size_t>(c) * D) +
                   lane * kPerLane;
      const float weight = p[i];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) acc[k] = fmaf(weight, to_float(v[k]), acc[k]);
    }
    __syncthreads();  // p and reduced are the next chunk's
  }
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) parts[warp][lane * kPerLane + k] = acc[k];
  __syncthreads();
  if (tid < D) {
    float num = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarpCount; ++i) num += parts[i][tid];
    out[(static_cast<size_t>(b) * a.heads + head) * D + tid] = from_float<T>(num / l);
  }
}
}  // namespace
}  // namespace mlxlab::cuda_decode
