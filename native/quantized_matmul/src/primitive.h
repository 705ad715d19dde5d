// The MLX primitive: y = x @ dequantize(w, scales, biases).T on the CPU stream.
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mlxlab {

namespace mx = mlx::core;

class QuantizedMatmulCpu : public mx::UnaryPrimitive {
 public:
  QuantizedMatmulCpu(mx::Stream stream, int group_size, int bits)
      : mx::UnaryPrimitive(stream), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  const char* name() const override { return "MlxlabQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int group_size_;
  int bits_;
};

// Checks the shapes as mx.quantized_matmul (transpose=True, affine) would, then
// builds the graph node; the result has x's leading dimensions and w's row count.
mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits);

}  // namespace mlxlab
