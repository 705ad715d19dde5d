// cuBLAS on the decode step's matmul shapes (Llama-1B, bf16), against the weight-read ceiling.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o gemm_shapes bench/gpu_gemm_shapes.cu -lcublas
//   ./gemm_shapes [batches, default 1,8,16,32,64]
//
// Each shape's weights in 16 copies (one a layer, as in a step, so that L2 holds none of
// them), cublasGemmEx (bf16 in and out, float accumulation) 160 calls timed with CUDA events
// after 16; microseconds a call and the weights' read rate. bench/gpu_step_kernels.cu reads
// the step's own kernels on the same shapes.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(status));
    std::exit(1);
  }
}

__global__ void fill(__nv_bfloat16* out, size_t count, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    out[i] = __float2bfloat16(0.02f * ((h & 0xffff) / 32768.0f - 1.0f));
  }
}

struct Shape {
  const char* name;
  int rows, depth;  // weight (rows, depth), row-major: y = x w^T
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  std::string list = argc > 1 ? argv[1] : "1,8,16,32,64";
  for (size_t at = 0; at < list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    batches.push_back(std::stoi(list.substr(at, comma - at)));
    at = comma + 1;
  }
  const Shape shapes[] = {{"qkv", 3072, 2048},     {"o", 2048, 2048},
                          {"gate_up", 16384, 2048}, {"down", 2048, 8192},
                          {"lm_head", 49152, 2048}};
  const int copies = 16, maximum = 64;
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  check(cublasSetStream(handle, stream), "cublasSetStream");
  void* workspace = nullptr;
  const size_t workspace_bytes = 32 << 20;
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc");
  check(cublasSetWorkspace(handle, workspace, workspace_bytes), "cublasSetWorkspace");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (const Shape& shape : shapes) {
    const int layers = shape.rows > 40000 ? 1 : copies;  // one lm_head: 200 MB outgrows L2
    std::vector<__nv_bfloat16*> weights(layers);
    const size_t count = static_cast<size_t>(shape.rows) * shape.depth;
    for (auto& w : weights) {
      check(cudaMalloc(&w, count * 2), "cudaMalloc");
      fill<<<1024, 256>>>(w, count, static_cast<unsigned>(&w - weights.data()) + 1);
    }
    __nv_bfloat16 *x, *y;
    check(cudaMalloc(&x, static_cast<size_t>(maximum) * shape.depth * 2), "cudaMalloc");
    check(cudaMalloc(&y, static_cast<size_t>(maximum) * shape.rows * 2), "cudaMalloc");
    fill<<<64, 256>>>(x, static_cast<size_t>(maximum) * shape.depth, 99);
    check(cudaDeviceSynchronize(), "fill");
    for (int batch : batches) {
      const float one = 1.0f, zero = 0.0f;
      // Column-major view: y^T (rows x batch) = w (rows x depth, w^T stored) . x^T.
      auto call = [&](int i) {
        check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, shape.rows, batch, shape.depth,
                           &one, weights[i % layers], CUDA_R_16BF, shape.depth, x, CUDA_R_16BF,
                           shape.depth, &zero, y, CUDA_R_16BF, shape.rows, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      };
      for (int i = 0; i < 16; ++i) call(i);
      const int calls = 160;
      check(cudaEventRecord(start, stream), "record");
      for (int i = 0; i < calls; ++i) call(i);
      check(cudaEventRecord(stop, stream), "record");
      check(cudaEventSynchronize(stop), "sync");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      const double us = 1000.0 * ms / calls;
      std::printf("%-8s batch %2d: %7.1f us, weights at %.2f TB/s\n", shape.name, batch, us,
                  count * 2 / (us * 1e-6) / 1e12);
    }
    for (auto* w : weights) cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  return 0;
}
