// mx.gather_qmm (transpose=True, affine) on the CPU: rows grouped by expert, each group one
// quantized matmul on the extension's kernels.
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mlxlab {

namespace mx = mlx::core;

class GatherQuantizedMatmul : public mx::UnaryPrimitive {
 public:
  GatherQuantizedMatmul(mx::Stream stream, int group_size, int bits)
      : mx::UnaryPrimitive(stream), group_size_(group_size), bits_(bits) {}
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  const char* name() const override { return "MlxlabGatherQuantizedMatmul"; }

 private:
  int group_size_, bits_;
};

// x (R, M, K), w (E, N, K * bits / 32) uint32, scales and biases (E, N, K / group_size),
// indices (R,): out (R, M, N), row r the product of x[r] and expert indices[r]'s matrix.
mx::array gather_quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                                  const mx::array& biases, const mx::array& indices,
                                  int group_size, int bits);

}  // namespace mlxlab
