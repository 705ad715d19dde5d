#include "array_io.h"

#include <stdexcept>

namespace mlxlab {

ScaleType scale_type(mx::Dtype dtype) {
  if (dtype == mx::float32) return ScaleType::Float32;
  if (dtype == mx::float16) return ScaleType::Float16;
  if (dtype == mx::bfloat16) return ScaleType::BFloat16;
  throw std::invalid_argument("qmm: scales and biases must be float32, float16 or bfloat16");
}

bool is_float(mx::Dtype dtype) {
  return dtype == mx::float32 || dtype == mx::float16 || dtype == mx::bfloat16;
}

const float* float_rows(const mx::array& x, std::vector<float>& copy) {
  if (x.dtype() == mx::float32 && x.flags().row_contiguous) {
    return x.data<float>();
  }
  copy.resize(x.size());
  const auto& shape = x.shape();
  const auto& strides = x.strides();
  const ScaleType type = scale_type(x.dtype());
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t offset = 0;
    size_t rest = i;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      offset += static_cast<int64_t>(rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    copy[i] = scale_at(x.data<void>(), type, offset);
  }
  return copy.data();
}

void store(const std::vector<float>& values, mx::array& out) {
  if (out.dtype() == mx::float16) {
    auto* dst = out.data<mx::float16_t>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = static_cast<mx::float16_t>(values[i]);
  } else {
    auto* dst = out.data<mx::bfloat16_t>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = static_cast<mx::bfloat16_t>(values[i]);
  }
}

}  // namespace mlxlab
