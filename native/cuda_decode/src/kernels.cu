// The decode step's kernels: 5 a layer (normed q/k/v matvec, attention with RoPE and the
// cache write, o matvec with the residual add, normed gate/up matvec with SwiGLU, down
// matvec with the residual add), one embedding gather and one normed lm_head matvec
// (step_body.cuh); here, which of the instances (step_*.cu) a step runs, and the step's
// sizes.
#include "step_body.cuh"

namespace mlxlab::cuda_decode {

// Compiled in step_*.cu, each in a file of its own.
extern STEP_INSTANCE(__half, 64);
extern STEP_INSTANCE(__half, 128);
extern STEP_INSTANCE(__nv_bfloat16, 64);
extern STEP_INSTANCE(__nv_bfloat16, 128);

namespace {

// A step's inputs into a replayed graph's slots (stage_inputs): a thread a row.
__global__ void stage(const int32_t* tokens, const int32_t* positions,
                      const int32_t* first_columns, int column, int batch, int32_t* to_tokens,
                      int32_t* to_positions, int32_t* to_first_columns, int32_t* to_column) {
  const int b = threadIdx.x;
  if (b < batch) {
    to_tokens[b] = tokens[b];
    to_positions[b] = positions[b];
    to_first_columns[b] = first_columns[b];
  }
  if (b == 0) *to_column = column;
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
         aligned(e * s.batch * s.heads * s.head_dim) + aligned(e * s.batch * s.intermediate) +
         2 * aligned(e * s.batch * s.hidden) + aligned(e * s.batch * 2 * s.intermediate);
}

bool takes_quantization(int bits, int group) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64);
}

bool fits(const Shape& s) {
  const bool staged_fit =  // the fused matvecs' staged input; the cuBLAS path stages none
      s.batch >= s.gemm_rows || 2 * static_cast<size_t>(s.batch) * staged_pitch(s.hidden) +
                                        tensor_partials_bytes(bucket(s.batch)) + kStaticShared <=
                                    s.shared_limit;
  const int most = s.batch >= s.gemm_rows ? kMaxGemmBatch : kMaxBatch;
  return s.batch >= 1 && s.batch <= most && (s.head_dim == 64 || s.head_dim == 128) &&
         s.hidden % 8 == 0 && s.intermediate % 8 == 0 && (s.heads * s.head_dim) % 8 == 0 &&
         s.kv_heads > 0 && s.heads % s.kv_heads == 0 && staged_fit;
}

cudaError_t launch_step(const Shape& s, const Pointers& p, cudaStream_t stream) {
  if (!fits(s)) return cudaErrorInvalidValue;
  return s.half ? for_dtype<__half>(s, p, stream) : for_dtype<__nv_bfloat16>(s, p, stream);
}

size_t slot_bytes() { return sizeof(int32_t) * (3 * kMaxGemmBatch + 1); }

Slots carve_slots(void* base) {
  auto* p = static_cast<int32_t*>(base);
  return Slots{p, p + kMaxGemmBatch, p + 2 * kMaxGemmBatch, p + 3 * kMaxGemmBatch};
}

cudaError_t stage_inputs(const Shape& s, const Pointers& p, const Slots& slots,
                         cudaStream_t stream) {
  if (s.batch < 1 || s.batch > kMaxGemmBatch) return cudaErrorInvalidValue;
  stage<<<1, kMaxGemmBatch, 0, stream>>>(p.tokens, p.positions, p.first_columns, s.column,
                                          s.batch, slots.tokens, slots.positions,
                                          slots.first_columns, slots.column);
  return cudaGetLastError();
}

}  // namespace mlxlab::cuda_decode
