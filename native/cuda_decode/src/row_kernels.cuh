// The kernels the cuBLAS path (gemm.h) runs between its matmuls, a block or a thread a row:
// the residual add fused with the next RMSNorm, and SwiGLU. Each rounds where the fused
// matvecs round (matvec.cuh, tensor_matvec.cuh), so both paths compute what mlx-lm computes.
#pragma once

#include "device_math.cuh"

namespace mlxlab::cuda_decode {
namespace {

// Row blockIdx.x of x (depth values, a multiple of 8): x += add (where given, rounded as
// mlx-lm's residual add), then normed = RMSNorm(x) * weight, rounded as mlx-lm's fast
// rms_norm (x scaled and rounded, then times the weight).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_norm(T* x, const T* add, const T* __restrict__ weight, float eps, T* normed, int depth) {
  __shared__ float partial[kWarps];
  const size_t offset = static_cast<size_t>(blockIdx.x) * depth;
  uint4* row = reinterpret_cast<uint4*>(x + offset);
  const int chunks = depth / 8;
  float squares = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    float v[8];
    unpack8<T>(row[c], v);
    if (add != nullptr) {
      float a[8];
      unpack8<T>(reinterpret_cast<const uint4*>(add + offset)[c], a);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = rounded<T>(v[i] + a[i]);
      row[c] = pack8<T>(v);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) squares = fmaf(v[i], v[i], squares);
  }
  squares = warp_sum(squares);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = squares;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) total += partial[i];
  const float normalizer = rsqrtf(total / static_cast<float>(depth) + eps);
  uint4* out = reinterpret_cast<uint4*>(normed + offset);
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    float v[8], w[8];
    unpack8<T>(row[c], v);  // this thread's own write above, if any
    unpack8<T>(reinterpret_cast<const uint4*>(weight)[c], w);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = w[i] * rounded<T>(v[i] * normalizer);
    out[c] = pack8<T>(v);
  }
}

// act (batch, intermediate) = silu(gate) * up, from wide (batch, 2 intermediate): each row's
// gate values, then its up values (the fused gate/up weight's order).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu(const T* __restrict__ wide, T* act, int intermediate, int batch) {
  const int chunks = intermediate / 8;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < batch * chunks; i += gridDim.x * kThreads) {
    const int b = i / chunks, c = i % chunks;
    const T* row = wide + static_cast<size_t>(b) * 2 * intermediate;
    float gate[8], up[8];
    unpack8<T>(reinterpret_cast<const uint4*>(row)[c], gate);
    unpack8<T>(reinterpret_cast<const uint4*>(row + intermediate)[c], up);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float sigmoid = rounded<T>(1.0f / (1.0f + expf(-gate[k])));
      gate[k] = rounded<T>(gate[k] * sigmoid) * up[k];
    }
    reinterpret_cast<uint4*>(act + static_cast<size_t>(b) * intermediate)[c] = pack8<T>(gate);
  }
}

}  // namespace
}  // namespace mlxlab::cuda_decode
