// The decode step's kernels: 5 a layer (normed q/k/v matvec, attention with RoPE and the
// cache write, o matvec with the residual add, normed gate/up matvec with SwiGLU, down
// matvec with the residual add), one embedding gather and one normed lm_head matvec.
//
// Each rounds to the model's dtype where mlx-lm's operations round (the norm's scaled
// input, every matmul's output, RoPE, SwiGLU's steps, the residual adds), so the step
// computes what mlx-lm's Llama computes up to the order of float sums.
#include "kernels.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "attend.cuh"
#include "matvec.cuh"

namespace mlxlab::cuda_decode {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kUnasked = 48 * 1024 - 2048;  // shared memory a block gets unasked
constexpr size_t kStaticShared = 2048;  // above the staged input: the norm's partial sums

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
