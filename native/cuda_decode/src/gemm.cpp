// cuBLAS for the step's matmuls (gemm.h). One handle a device, made once and kept: the step
// runs on MLX's one GPU stream, set on the handle before each call.
#include "gemm.h"

#include <cublas_v2.h>

#include <map>
#include <mutex>

namespace mlxlab::cuda_decode {
namespace {

// cuBLAS's own default workspace on Hopper; given explicitly so that it never allocates one
// while the step's kernels are queued.
constexpr size_t kWorkspace = 32u << 20;

struct Handle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

std::mutex lock;

// The current device's handle, or null where cuBLAS could not start there.
Handle* current() {
  static std::map<int, Handle> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  auto [at, added] = handles.try_emplace(device);
  Handle& h = at->second;
  if (added) {
    if (cublasCreate(&h.handle) != CUBLAS_STATUS_SUCCESS) {
      h.handle = nullptr;
    } else if (cudaMalloc(&h.workspace, kWorkspace) != cudaSuccess ||
               cublasSetWorkspace(h.handle, h.workspace, kWorkspace) != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h.handle);
      h.handle = nullptr;
    }
  }
  return h.handle != nullptr ? &h : nullptr;
}

}  // namespace

bool gemm_ready() {
  std::lock_guard<std::mutex> guard(lock);
  return current() != nullptr;
}

cudaError_t gemm(bool half, cudaStream_t stream, const void* w, const void* x, void* out,
                 int n_out, int depth, int batch) {
  std::lock_guard<std::mutex> guard(lock);
  Handle* h = current();
  if (h == nullptr) return cudaErrorNotSupported;
  if (cublasSetStream(h->handle, stream) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType type = half ? CUDA_R_16F : CUDA_R_16BF;
  // Column-major, as cuBLAS sees row-major arrays: out^T (n_out x batch) = w x^T.
  const cublasStatus_t status =
      cublasGemmEx(h->handle, CUBLAS_OP_T, CUBLAS_OP_N, n_out, batch, depth, &one, w, type,
                   depth, x, type, depth, &zero, out, type, n_out, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  return status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace mlxlab::cuda_decode
