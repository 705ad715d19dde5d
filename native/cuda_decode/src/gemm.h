// The step's matmuls through cuBLAS, for batches of many rows.
//
// From 16 rows a batch the step's own tensor-core matvecs read their weights at 0.2-1.0 TB/s
// on an H200, where cuBLAS read the same shapes at 1.1-3.8 TB/s (bench/gpu_gemm_shapes.cu,
// docs/BENCHMARKS.md); there the step runs its norms, attention and SwiGLU around cuBLAS.
#pragma once

#include <cuda_runtime.h>

namespace mlxlab::cuda_decode {

// Whether cuBLASLt is usable on the current device (its handle is made on the first call).
bool gemm_ready();

// out (batch, n_out) = x (batch, depth) times w (n_out, depth) transposed: row-major, in the
// model's dtype (float16 where `half`, else bfloat16), summed in float.
cudaError_t gemm(bool half, cudaStream_t stream, const void* w, const void* x, void* out,
                 int n_out, int depth, int batch);

}  // namespace mlxlab::cuda_decode
