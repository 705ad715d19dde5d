// Conversions, rounding and warp sums the decode step's kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace mlxlab::cuda_decode {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kAttentionThreads = 128;

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16(v); }
template <>
__device__ __forceinline__ __half from_float(float v) { return __float2half(v); }

// `v` rounded to T, as mlx-lm holds an intermediate result.
template <typename T>
__device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

// The 8 values of a 16-byte word, by bit operations on its four 32-bit lanes: read through
// a T pointer instead, the compiler split the one 16-byte load into eight 2-byte ones, and
// a batch's step issued eight times the shared-memory loads (8 rows: 4.5 ms, now 2.7).
__device__ __forceinline__ void unpack2(uint32_t word, float& low, float& high,
                                        const __nv_bfloat16*) {
  low = __uint_as_float(word << 16);
  high = __uint_as_float(word & 0xffff0000u);
}

__device__ __forceinline__ void unpack2(uint32_t word, float& low, float& high, const __half*) {
  __half2 pair;
  memcpy(&pair, &word, sizeof(pair));
  const float2 both = __half22float2(pair);
  low = both.x;
  high = both.y;
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& word, float out[8]) {
  const T* kind = nullptr;
  unpack2(word.x, out[0], out[1], kind);
  unpack2(word.y, out[2], out[3], kind);
  unpack2(word.z, out[4], out[5], kind);
  unpack2(word.w, out[6], out[7], kind);
}

// Eight floats as a 16-byte word of T, each rounded to nearest.
template <typename T>
__device__ __forceinline__ uint4 pack8(const float v[8]) {
  uint32_t lanes[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const T low = from_float<T>(v[2 * i]), high = from_float<T>(v[2 * i + 1]);
    uint16_t l, h;
    memcpy(&l, &low, 2);
    memcpy(&h, &high, 2);
    lanes[i] = static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
  }
  return make_uint4(lanes[0], lanes[1], lanes[2], lanes[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Programmatic dependent launch (sm_90): a kernel's blocks may start while the kernel before
// it ends, and until await_previous() they touch nothing but weights; release_next() lets
// the next kernel's blocks start as soon as every block of this one has begun.
__device__ __forceinline__ void await_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// `rows` rows of `depth` values (a multiple of 8) of x into shared memory, `pitch` values a
// row apart: 16 bytes a copy, every copy in flight at once (cp.async, through L2, where the
// kernel before left them). Every thread of the block takes part.
template <typename T>
__device__ void stage_rows(const T* x, int depth, int pitch, int rows, T* staged) {
  const int chunks = depth / 8;
  for (int i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
    const int r = i / chunks, c = i % chunks;
    const auto to = static_cast<uint32_t>(__cvta_generic_to_shared(staged + r * pitch + c * 8));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to),
                 "l"(x + static_cast<size_t>(r) * depth + c * 8));
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
}

// Ask L2 for the 128-byte line at `p`: a weight the block reads first, while it waits.
__device__ __forceinline__ void prefetch_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
}  // namespace
}  // namespace mlxlab::cuda_decode
