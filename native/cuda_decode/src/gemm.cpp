// cuBLASLt for the step's matmuls (gemm.h). cublasGemmEx cost the host about 10 us a call
// (65 calls a 32-row step: 1.7-1.8 ms of host time against 1.46 ms on the device), most of it
// describing the problem and choosing an algorithm anew; here each shape's descriptors and
// algorithm are made once and kept, and a call is one cublasLtMatmul. One handle a device;
// the step runs on MLX's one GPU stream, passed with each call.
#include "gemm.h"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace mlxlab::cuda_decode {
namespace {

// cuBLAS's own default workspace on Hopper; given explicitly so that it never allocates one
// while the step's kernels are queued.
constexpr size_t kWorkspace = 32u << 20;

// One shape's descriptors and the algorithm cuBLASLt's heuristic chose for it.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ready = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (op) cublasLtMatmulDescDestroy(op);
  }

  // Column-major, as cuBLAS sees row-major arrays: out^T (n_out x batch) = w x^T, w stored
  // as (depth x n_out) and transposed.
  bool make(cublasLtHandle_t handle, bool half, int n_out, int depth, int batch) {
    const cudaDataType type = half ? CUDA_R_16F : CUDA_R_16BF;
    const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    cublasLtMatmulPreference_t preference = nullptr;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const bool made =
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transposed,
                                       sizeof(transposed)) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&w, type, depth, n_out, depth) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&x, type, depth, batch, depth) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&out, type, n_out, batch, n_out) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(preference,
                                             CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &kWorkspace, sizeof(kWorkspace)) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(handle, op, w, x, out, out, preference, 1, &result,
                                       &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0;
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    algo = result.algo;
    return ready = made;
  }
};

struct Device {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  // By (half, n_out, depth, batch): a step's five shapes at each batch size it has run.
  std::map<std::tuple<bool, int, int, int>, std::unique_ptr<Plan>> plans;
};

std::mutex lock;

// The current device's handle and plans, or null where cuBLASLt could not start there.
Device* current() {
  static std::map<int, Device> devices;
  int id = 0;
  if (cudaGetDevice(&id) != cudaSuccess) return nullptr;
  auto [at, added] = devices.try_emplace(id);
  Device& d = at->second;
  if (added) {
    if (cublasLtCreate(&d.handle) != CUBLAS_STATUS_SUCCESS) {
      d.handle = nullptr;
    } else if (cudaMalloc(&d.workspace, kWorkspace) != cudaSuccess) {
      cublasLtDestroy(d.handle);
      d.handle = nullptr;
    }
  }
  return d.handle != nullptr ? &d : nullptr;
}

}  // namespace

bool gemm_ready() {
  std::lock_guard<std::mutex> guard(lock);
  return current() != nullptr;
}

cudaError_t gemm(bool half, cudaStream_t stream, const void* w, const void* x, void* out,
                 int n_out, int depth, int batch) {
  std::lock_guard<std::mutex> guard(lock);
  Device* d = current();
  if (d == nullptr) return cudaErrorNotSupported;
  std::unique_ptr<Plan>& plan = d->plans[{half, n_out, depth, batch}];
  if (!plan) {
    plan = std::make_unique<Plan>();
    plan->make(d->handle, half, n_out, depth, batch);
  }
  if (!plan->ready) return cudaErrorNotSupported;
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t status =
      cublasLtMatmul(d->handle, plan->op, &one, w, plan->w, x, plan->x, &zero, out, plan->out,
                     out, plan->out, &plan->algo, d->workspace, kWorkspace, stream);
  return status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace mlxlab::cuda_decode
