#include "primitive.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "array_io.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxlab {

void QuantizedMatmulCpu::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& input : inputs) encoder.set_input_array(input);
  encoder.set_output_array(out);
  for (int i = 1; i < 4; ++i) {
    if (!inputs[i].flags().row_contiguous) {
      throw std::invalid_argument("qmm: w, scales and biases must be row-contiguous");
    }
  }
  encoder.dispatch([x = mx::array::unsafe_weak_copy(inputs[0]),
                    w = mx::array::unsafe_weak_copy(inputs[1]),
                    scales = mx::array::unsafe_weak_copy(inputs[2]),
                    biases = mx::array::unsafe_weak_copy(inputs[3]),
                    out = mx::array::unsafe_weak_copy(out), group_size = group_size_,
                    bits = bits_]() mutable {
    std::vector<float> x_copy, y_copy;
    const int K = x.shape(-1);
    const int N = out.shape(-1);
    Problem p;
    p.x = float_rows(x, x_copy);
    p.w = w.data<uint8_t>();
    p.scales = scales.data<void>();
    p.biases = biases.data<void>();
    p.scale_type = scale_type(scales.dtype());
    p.M = static_cast<int>(x.size() / K);
    p.N = N;
    p.K = K;
    p.group_size = group_size;
    p.bits = bits;
    if (out.dtype() == mx::float32) {
      p.y = out.data<float>();
      compute(p);
    } else {
      y_copy.resize(out.size());
      p.y = y_copy.data();
      compute(p);
      store(y_copy, out);
    }
  });
}

void QuantizedMatmulCpu::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("qmm: MlxlabQuantizedMatmul runs on the CPU only");
}

bool QuantizedMatmulCpu::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const QuantizedMatmulCpu&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits) {
  if (bits != 4 && bits != 8) {
    throw std::invalid_argument("qmm: bits must be 4 or 8, not " + std::to_string(bits));
  }
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    throw std::invalid_argument("qmm: group_size must be 32, 64 or 128");
  }
  if (!is_float(x.dtype())) {
    throw std::invalid_argument("qmm: x must be float32, float16 or bfloat16");
  }
  if (w.dtype() != mx::uint32 || w.ndim() != 2 || scales.ndim() != 2 ||
      scales.shape() != biases.shape() || scales.dtype() != biases.dtype()) {
    throw std::invalid_argument("qmm: w must be 2-D uint32, scales and biases alike");
  }
  const int N = w.shape(0);
  const int K = w.shape(1) * 32 / bits;
  if (x.ndim() < 1 || x.shape(-1) != K || scales.shape(0) != N ||
      scales.shape(1) * group_size != K) {
    throw std::invalid_argument("qmm: x's last dimension must be " + std::to_string(K) +
                                " and scales must be (N, K / group_size)");
  }
  auto shape = x.shape();
  shape.back() = N;
  const auto dtype = mx::promote_types(x.dtype(), scales.dtype());
  auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array(std::move(shape), dtype,
                   std::make_shared<QuantizedMatmulCpu>(stream, group_size, bits),
                   {x, w, scales, biases});
}

}  // namespace mlxlab
