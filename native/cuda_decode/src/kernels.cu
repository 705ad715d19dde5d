// The decode step's kernels: 5 a layer (normed q/k/v matvec, attention with RoPE and the
// cache write, o matvec with the residual add, normed gate/up matvec with SwiGLU, down
// matvec with the residual add), one embedding gather and one normed lm_head matvec.
//
// Each rounds to the model's dtype where mlx-lm's operations round (the norm's scaled
// input, every matmul's output, RoPE, SwiGLU's steps, the residual adds), so the step
// computes what mlx-lm's Llama computes up to the order of float sums.
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace mlxlab::cuda_decode {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kAttentionThreads = 128;
constexpr size_t kAlign = 256;
constexpr size_t kUnasked = 48 * 1024 - 2048;  // shared memory a block gets unasked
constexpr size_t kStaticShared = 2048;  // above the staged input: the norm's partial sums

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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__global__ void embed(const T* __restrict__ table, const int32_t* __restrict__ tokens,
                      T* __restrict__ x, int hidden) {
  const T* row = table + static_cast<size_t>(tokens[blockIdx.x]) * hidden;
  T* out = x + static_cast<size_t>(blockIdx.x) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) out[j] = row[j];
}

enum Mode { kPlain, kResidual, kSwiglu };

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

// Rows of `w` (n_out of them; for kSwiglu n_out gate rows then n_out up rows) times
// `batch` (at most B) input vectors of `depth`. With NORM the input is RMSNorm(x) *
// norm_weight, staged in shared memory. Each warp computes two rows, 16 bytes of weights a
// lane a load; every row of the batch reads the same weights once.
template <typename T, int B, int MODE, bool NORM>
__global__ void __launch_bounds__(kThreads)
    matvec(const T* __restrict__ w, const T* x, const T* __restrict__ norm_weight, float eps,
           T* out, int n_out, int depth, int batch) {
  extern __shared__ __align__(16) unsigned char shared[];
  const T* in = x;
  if constexpr (NORM) {
    T* staged = reinterpret_cast<T*>(shared);
    __shared__ float partial[kWarps][B];
    float squares[B];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      squares[b] = 0.0f;
      for (int j = threadIdx.x; b < batch && j < depth; j += kThreads) {
        const float v = to_float(x[b * depth + j]);
        squares[b] += v * v;
      }
      squares[b] = warp_sum(squares[b]);
      if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][b] = squares[b];
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < B; ++b) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < kWarps; ++i) total += partial[i][b];
      const float normalizer = rsqrtf(total / static_cast<float>(depth) + eps);
      for (int j = threadIdx.x; b < batch && j < depth; j += kThreads) {
        const float scaled = rounded<T>(to_float(x[b * depth + j]) * normalizer);
        staged[b * depth + j] = from_float<T>(to_float(norm_weight[j]) * scaled);
      }
    }
    __syncthreads();
    in = staged;
  }
  const int lane = threadIdx.x % 32;
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  // A grid of a few blocks an SM, each warp taking every (grid)th unit: the block's staged
  // input serves many rows (with 32 rows a batch it is 128 KB of shared memory).
  for (int unit = blockIdx.x * kWarps + threadIdx.x / 32; unit < units;
       unit += gridDim.x * kWarps) {
    const int first = MODE == kSwiglu ? unit : 2 * unit;
    const int second = MODE == kSwiglu ? unit + n_out : min(2 * unit + 1, n_out - 1);
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
    if (lane != 0) continue;
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
}

struct AttentionArgs {
  int heads, kv_heads, capacity, column;
  bool traditional;
  float scale, rope_scale, log2_base;
};

// One query head of one row: RoPE on its query and on its kv head's new key (the first
// query head of the group writes the key and value into the cache), then softmax(q k) v
// over the row's columns, online, each thread over every 128th column.
template <typename T, int D>
__global__ void __launch_bounds__(kAttentionThreads)
    attend(const T* __restrict__ qkv, T* keys, T* values, T* __restrict__ out,
           const int32_t* __restrict__ positions, const int32_t* __restrict__ first_columns,
           const float* __restrict__ rope_freqs, AttentionArgs a) {
  constexpr int kHalf = D / 2;
  const int head = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int group = a.heads / a.kv_heads, kv = head / group;
  const T* row = qkv + static_cast<size_t>(b) * (a.heads + 2 * a.kv_heads) * D;
  __shared__ float q[D];
  __shared__ __align__(16) T new_key[D];
  __shared__ __align__(16) T new_value[D];
  if (tid < kHalf) {
    const int i1 = a.traditional ? 2 * tid : tid;
    const int i2 = a.traditional ? 2 * tid + 1 : tid + kHalf;
    // The angle as MLX's RoPE kernel forms it.
    const float inv_freq = rope_freqs != nullptr
                               ? 1.0f / rope_freqs[tid]
                               : exp2f(-(static_cast<float>(tid) / kHalf) * a.log2_base);
    const float theta = a.rope_scale * static_cast<float>(positions[b]) * inv_freq;
    const float c = cosf(theta), s = sinf(theta);
    const T* qr = row + head * D;
    float x1 = to_float(qr[i1]), x2 = to_float(qr[i2]);
    q[i1] = a.scale * rounded<T>(x1 * c - x2 * s);
    q[i2] = a.scale * rounded<T>(x1 * s + x2 * c);
    const T* kr = row + (a.heads + kv) * D;
    x1 = to_float(kr[i1]);
    x2 = to_float(kr[i2]);
    new_key[i1] = from_float<T>(x1 * c - x2 * s);
    new_key[i2] = from_float<T>(x1 * s + x2 * c);
  }
  if (tid < D) new_value[tid] = row[(a.heads + a.kv_heads + kv) * D + tid];
  __syncthreads();
  const size_t base = (static_cast<size_t>(b) * a.kv_heads + kv) * a.capacity * D;
  if (head % group == 0 && tid < D) {
    keys[base + static_cast<size_t>(a.column) * D + tid] = new_key[tid];
    values[base + static_cast<size_t>(a.column) * D + tid] = new_value[tid];
  }
  float m = -INFINITY, l = 0.0f, acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (int col = first_columns[b] + tid; col <= a.column; col += kAttentionThreads) {
    const bool fresh = col == a.column;  // its key and value are not in the cache yet here
    const uint4* kp = reinterpret_cast<const uint4*>(
        fresh ? new_key : keys + base + static_cast<size_t>(col) * D);
    const uint4* vp = reinterpret_cast<const uint4*>(
        fresh ? new_value : values + base + static_cast<size_t>(col) * D);
    float score = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float k8[8];
      unpack8<T>(kp[j], k8);
#pragma unroll
      for (int i = 0; i < 8; ++i) score = fmaf(q[j * 8 + i], k8[i], score);
    }
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

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// How many blocks of `kernel` the GPU holds at once with `shared` bytes each (at least one
// an SM): a grid of more would only run in waves.
template <typename Kernel>
int resident_blocks(Kernel kernel, size_t shared) {
  static std::mutex lock;
  static std::map<size_t, int> known;  // this kernel's figure by shared bytes
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count;
  }();
  std::lock_guard<std::mutex> guard(lock);
  auto found = known.find(shared);
  if (found != known.end()) return found->second;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared) !=
      cudaSuccess) {
    per_sm = 1;
  }
  return known[shared] = sms * std::max(per_sm, 1);
}

struct Scratch {
  void* x;  // the residual stream (batch, hidden)
  void* qkv;  // (batch, (heads + 2 kv_heads) head_dim)
  void* attention;  // (batch, heads head_dim)
  void* act;  // (batch, intermediate)
};

Scratch carve(const Shape& s, void* base) {
  const size_t e = s.half ? sizeof(__half) : sizeof(__nv_bfloat16);
  char* p = static_cast<char*>(base);
  Scratch out;
  out.x = p;
  p += aligned(e * s.batch * s.hidden);
  out.qkv = p;
  p += aligned(e * s.batch * (s.heads + 2 * s.kv_heads) * s.head_dim);
  out.attention = p;
  p += aligned(e * s.batch * s.heads * s.head_dim);
  out.act = p;
  return out;
}

template <typename T, int B, int MODE, bool NORM>
void launch_matvec(const void* w, const void* x, const void* norm, float eps, void* out,
                   int n_out, int depth, int batch, cudaStream_t stream) {
  const int units = MODE == kSwiglu ? n_out : (n_out + 1) / 2;
  const size_t shared = NORM ? sizeof(T) * batch * depth : 0;
  if (shared > kUnasked) {
    // More than a block gets unasked: raise this kernel's limit once, to the most a block
    // may have (fits() kept the staged input under it).
    static const cudaError_t raised = [] {
      int device = 0, most = 0;
      cudaGetDevice(&device);
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      return cudaFuncSetAttribute(matvec<T, B, MODE, NORM>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  most - static_cast<int>(kStaticShared));
    }();
    (void)raised;
  }
  const int blocks = std::min((units + kWarps - 1) / kWarps,
                              resident_blocks(matvec<T, B, MODE, NORM>, shared));
  matvec<T, B, MODE, NORM><<<blocks, kThreads, shared, stream>>>(
      static_cast<const T*>(w), static_cast<const T*>(x), static_cast<const T*>(norm), eps,
      static_cast<T*>(out), n_out, depth, batch);
}

template <typename T, int B, int D>
cudaError_t step(const Shape& s, const Pointers& p, cudaStream_t stream) {
  const Scratch t = carve(s, p.scratch);
  const int qkv_rows = (s.heads + 2 * s.kv_heads) * D;
  const AttentionArgs args{s.heads,      s.kv_heads,       s.capacity, s.column, s.traditional,
                           s.attention_scale, s.rope_scale, s.log2_base};
  const int n = s.batch;
  embed<T><<<n, kThreads, 0, stream>>>(static_cast<const T*>(p.embedding), p.tokens,
                                       static_cast<T*>(t.x), s.hidden);
  for (const Layer& layer : p.layers) {
    launch_matvec<T, B, kPlain, true>(layer.qkv, t.x, layer.input_norm, s.eps, t.qkv, qkv_rows,
                                      s.hidden, n, stream);
    attend<T, D><<<dim3(s.heads, n), kAttentionThreads, 0, stream>>>(
        static_cast<const T*>(t.qkv), static_cast<T*>(layer.keys), static_cast<T*>(layer.values),
        static_cast<T*>(t.attention), p.positions, p.first_columns, p.rope_freqs, args);
    launch_matvec<T, B, kResidual, false>(layer.o, t.attention, nullptr, 0.0f, t.x, s.hidden,
                                          s.heads * D, n, stream);
    launch_matvec<T, B, kSwiglu, true>(layer.gate_up, t.x, layer.post_norm, s.eps, t.act,
                                       s.intermediate, s.hidden, n, stream);
    launch_matvec<T, B, kResidual, false>(layer.down, t.act, nullptr, 0.0f, t.x, s.hidden,
                                          s.intermediate, n, stream);
  }
  launch_matvec<T, B, kPlain, true>(p.lm_head, t.x, p.final_norm, s.eps, p.logits, s.vocab,
                                    s.hidden, n, stream);
  return cudaGetLastError();
}

// The kernels are compiled for batches of up to 1, 2, 4, 8, 16 and 32 rows.
template <typename T, int D>
cudaError_t for_batch(const Shape& s, const Pointers& p, cudaStream_t stream) {
  if (s.batch <= 1) return step<T, 1, D>(s, p, stream);
  if (s.batch <= 2) return step<T, 2, D>(s, p, stream);
  if (s.batch <= 4) return step<T, 4, D>(s, p, stream);
  if (s.batch <= 8) return step<T, 8, D>(s, p, stream);
  if (s.batch <= 16) return step<T, 16, D>(s, p, stream);
  return step<T, 32, D>(s, p, stream);
}

template <typename T>
cudaError_t for_dtype(const Shape& s, const Pointers& p, cudaStream_t stream) {
  switch (s.head_dim) {
    case 64: return for_batch<T, 64>(s, p, stream);
    case 128: return for_batch<T, 128>(s, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

size_t scratch_bytes(const Shape& s) {
  const size_t e = 2;
  return aligned(e * s.batch * s.hidden) +
         aligned(e * s.batch * (s.heads + 2 * s.kv_heads) * s.head_dim) +
         aligned(e * s.batch * s.heads * s.head_dim) + aligned(e * s.batch * s.intermediate);
}

bool fits(const Shape& s) {
  return s.batch >= 1 && s.batch <= kMaxBatch && (s.head_dim == 64 || s.head_dim == 128) &&
         s.hidden % 8 == 0 && s.intermediate % 8 == 0 && (s.heads * s.head_dim) % 8 == 0 &&
         s.kv_heads > 0 && s.heads % s.kv_heads == 0 &&
         2 * static_cast<size_t>(s.batch) * s.hidden + kStaticShared <= s.shared_limit;
}

cudaError_t launch_step(const Shape& s, const Pointers& p, cudaStream_t stream) {
  if (!fits(s)) return cudaErrorInvalidValue;
  return s.half ? for_dtype<__half>(s, p, stream) : for_dtype<__nv_bfloat16>(s, p, stream);
}

}  // namespace mlxlab::cuda_decode
