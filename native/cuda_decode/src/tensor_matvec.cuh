// The step's matvecs on tensor cores, for batches: a warp multiplies 16 weight rows by up to
// 8 batch rows at a time with mma.sync m16n8k16 (float accumulators), where the CUDA-core
// kernels (matvec.cuh) spent one FMA a weight a batch row and fell behind MLX's own GEMMs
// from 16 rows ("One primitive a decode step" in docs/BENCHMARKS.md's history:
// git show 02df74b:docs/BENCHMARKS.md).
#pragma once

#include <type_traits>

#include "matvec.cuh"

namespace mlxlab::cuda_decode {
namespace {

// d += a b for one m16n8k16 tile: a as four registers of two values (rows g and g + 8, two
// k-halves), b as two.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// A tile's 16 rows of `w`: rows g and g + 8 of the fragment. For kSwiglu a tile is 8 units,
// its gate rows then its up rows, so that a lane holds a unit's gate and up sums together.
// A tensor-core block's warps: with 32 rows a batch its staged input leaves room for one
// block an SM, and at 8 warps an SM the kernels waited on memory latency (ncu: 12% of the
// issue slots used, DRAM 4-16% busy).
// Overridable at compile time for bench/gpu_step_kernels.sh, which times variants.
#ifndef MLXLAB_TENSOR_WARPS
#define MLXLAB_TENSOR_WARPS 16
#endif
#ifndef MLXLAB_TENSOR_DEPTH
#define MLXLAB_TENSOR_DEPTH kDepth
#endif
constexpr int kTensorWarps = MLXLAB_TENSOR_WARPS;
constexpr int kTensorThreads = kTensorWarps * 32;
// 32-column steps of each weight row a lane loads before any is used.
constexpr int kTensorDepth = MLXLAB_TENSOR_DEPTH;

template <int MODE>
__device__ __forceinline__ int tile_row(int tile, int r, int n_out) {
  if constexpr (MODE == kSwiglu) {
    const int unit = min(tile * 8 + r % 8, n_out - 1);
    return r < 8 ? unit : unit + n_out;
  } else {
    return min(tile * 16 + r, n_out - 1);
  }
}

template <int MODE>
__host__ __device__ constexpr int tile_count(int n_out) {
  return MODE == kSwiglu ? (n_out + 7) / 8 : (n_out + 15) / 16;
}

// The staged input's row pitch, in values: 32 more than a row, so that the 8 rows a warp's
// load spans fall in different banks (a row of 2048 values put them all in the same ones).
__host__ __device__ constexpr int staged_pitch(int depth) { return depth + 32; }

// Shared memory the kernel needs above the staged input: each warp's partial sums.
__host__ __device__ constexpr size_t tensor_partials_bytes(int batch_template) {
  return sizeof(float) * kTensorWarps * 4 * ((batch_template + 7) / 8) * 32;
}

// A lane's share of the first rounds its tile's warp reads of `row` (`round_bytes` a round,
// every splits-th round from `slice`, up to `end`), asked of L2 while the kernel before
// ends: lanes 0-15 take one round of their rows, 16-31 the next.
__device__ __forceinline__ void prefetch_rounds(const void* row, int round_bytes, int slice,
                                                int splits, int end, int lane) {
  const char* r = static_cast<const char*>(row);
  for (int s = slice + (lane / 16) * splits; s < end; s += 2 * splits) {
    for (int line = 0; line < round_bytes; line += 128) prefetch_line(r + s * round_bytes + line);
  }
}

// A tensor-core kernel's input rows: RMSNorm(x) * norm_weight staged in shared memory
// (NORM, `pitch` values a row apart), or x as it is; and where the warps' partial sums go,
// past the staged rows. Every thread of the block takes part.
template <typename T>
struct TensorInput {
  const T* rows;
  int pitch;
  float* partials;
};

template <typename T, int B, bool NORM>
__device__ __forceinline__ TensorInput<T> tensor_input(const T* x, const T* norm_weight, float eps,
                                                       int depth, int batch,
                                                       unsigned char* shared) {
  if constexpr (NORM) {
    const int pitch = staged_pitch(depth);
    stage_normed<T, B, kTensorWarps>(x, norm_weight, eps, depth, pitch, batch,
                                     reinterpret_cast<T*>(shared));
    return {reinterpret_cast<const T*>(shared), pitch,
            reinterpret_cast<float*>(shared + sizeof(T) * batch * pitch)};
  } else {
    return {x, depth, reinterpret_cast<float*>(shared)};
  }
}

// The tile's warps add up their sums in shared memory (`splits` warps a tile, neighbours);
// whether this warp is the tile's first, which then holds the totals and stores them.
template <int N>
__device__ __forceinline__ bool meet_splits(float (&d)[N][4], float* partials, int warp,
                                            int lane, int splits, int slice) {
  if (splits == 1) return true;
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partials[(warp * N * 4 + j * 4 + i) * 32 + lane] = d[j][i];
  }
  __syncthreads();
  if (slice == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float total = d[j][i];
        for (int other = 1; other < splits; ++other) {
          total += partials[((warp + other) * N * 4 + j * 4 + i) * 32 + lane];
        }
        d[j][i] = total;
      }
    }
  }
  __syncthreads();
  return slice == 0;
}

// A tile's outputs from its sums, as store_unit() writes a unit's. d[j]: rows g (0, 1) and
// g + 8 (2, 3) of the tile, batch rows 8j + 2t and 8j + 2t + 1.
template <typename T, int MODE, int N>
__device__ __forceinline__ void store_tile(const float (&d)[N][4], T* out, int tile, int n_out,
                                           int batch, int g, int t) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int b = 8 * j + 2 * t + half;
      if (b >= batch) continue;
      T* row = out + static_cast<size_t>(b) * n_out;
      if constexpr (MODE == kSwiglu) {
        const int unit = tile * 8 + g;
        if (unit >= n_out) continue;
        const float gate = rounded<T>(d[j][half]), up = rounded<T>(d[j][2 + half]);
        const float sigmoid = rounded<T>(1.0f / (1.0f + expf(-gate)));
        row[unit] = from_float<T>(rounded<T>(gate * sigmoid) * up);
      } else {
#pragma unroll
        for (int upper = 0; upper < 2; ++upper) {
          const int r = tile * 16 + g + 8 * upper;
          if (r >= n_out) continue;
          const float sum = d[j][2 * upper + half];
          if constexpr (MODE == kResidual) {
            row[r] = from_float<T>(to_float(row[r]) + rounded<T>(sum));
          } else {
            row[r] = from_float<T>(sum);
          }
        }
      }
    }
  }
}

// Rows of `w` times `batch` (at most B) input rows of `depth` (a multiple of 32), as
// matvec() computes them. A block takes kTensorWarps / splits tiles at a time, `splits` warps a
// tile, each over every splits-th 32 columns; the warps' sums meet in shared memory.
//
// The k order inside a 32-column step is free, since both operands follow it: a lane loads
// 16 bytes (8 columns) of its weight rows and of its batch rows, and the first four values
// are its k-slots of the first mma, the last four its slots of the second. So every load is
// 16 bytes, and no shuffle is needed.
template <typename T, int B, int MODE, bool NORM>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_matvec(const T* __restrict__ w, const T* x, const T* __restrict__ norm_weight,
                  float eps, T* out, int n_out, int depth, int batch, int splits) {
  constexpr int N = (B + 7) / 8;  // mma tiles across the batch
  extern __shared__ __align__(16) unsigned char shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = tile_count<MODE>(n_out), per_block = kTensorWarps / splits;
  const int slice = warp % splits, steps = depth / 32;
  release_next();
  {  // what the first round loads, asked of L2 while the kernel before ends
    const int tile = min(blockIdx.x * per_block + warp / splits, tiles - 1);
    prefetch_rounds(w + static_cast<size_t>(tile_row<MODE>(tile, lane % 16, n_out)) * depth, 64,
                    slice, splits, min(steps, slice + kTensorDepth * splits), lane);
  }
  await_previous();
  const TensorInput<T> input = tensor_input<T, B, NORM>(x, norm_weight, eps, depth, batch, shared);
  const T* in = input.rows;
  const int pitch = input.pitch;
  float* partials = input.partials;
  const uint4* rows_in[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    // Batch rows past the batch read its last row: their columns are never stored.
    rows_in[j] = reinterpret_cast<const uint4*>(in + static_cast<size_t>(min(8 * j + g, batch - 1)) *
                                                         pitch) + t;
  }
  for (int first = blockIdx.x * per_block; first < tiles; first += gridDim.x * per_block) {
    const int tile = first + warp / splits;
    const int here = min(tile, tiles - 1);
    const uint4* w0 = reinterpret_cast<const uint4*>(
                          w + static_cast<size_t>(tile_row<MODE>(here, g, n_out)) * depth) + t;
    const uint4* w1 = reinterpret_cast<const uint4*>(
                          w + static_cast<size_t>(tile_row<MODE>(here, g + 8, n_out)) * depth) +
                      t;
    float d[N][4];
#pragma unroll
    for (int j = 0; j < N; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    // A step's input words, loaded just before use: loading the residual matvecs' (from L2)
    // with the round's weights took registers and lost 15% at 8 and 32 rows.
    auto inputs = [&](int step, uint4(&v)[N]) {
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = NORM ? rows_in[j][4 * step] : __ldg(rows_in[j] + 4 * step);
    };
    auto multiply = [&](const uint4& a, const uint4& b, const uint4(&v)[N]) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        mma<T>(d[j], a.x, b.x, a.y, b.y, v[j].x, v[j].y);
        mma<T>(d[j], a.z, b.z, a.w, b.w, v[j].z, v[j].w);
      }
    };
    int s = slice;
    for (; s + splits * (kTensorDepth - 1) < steps; s += splits * kTensorDepth) {
      uint4 a[kTensorDepth], b[kTensorDepth];
#pragma unroll
      for (int u = 0; u < kTensorDepth; ++u) {
        a[u] = __ldg(w0 + 4 * (s + splits * u));
        b[u] = __ldg(w1 + 4 * (s + splits * u));
      }
#pragma unroll
      for (int u = 0; u < kTensorDepth; ++u) {
        uint4 v[N];
        inputs(s + splits * u, v);
        multiply(a[u], b[u], v);
      }
    }
    for (; s < steps; s += splits) {
      uint4 v[N];
      inputs(s, v);
      multiply(__ldg(w0 + 4 * s), __ldg(w1 + 4 * s), v);
    }

    if (!meet_splits<N>(d, partials, warp, lane, splits, slice) || tile >= tiles) continue;
    store_tile<T, MODE, N>(d, out, tile, n_out, batch, g, t);
  }
}
}  // namespace
}  // namespace mlxlab::cuda_decode
