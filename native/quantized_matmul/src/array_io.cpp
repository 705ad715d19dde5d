#include "array_io.h"

#include <cstring>
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

namespace {

// `count` values from `from` (an element offset), `stride` elements apart, as float32.
void row_as_float(const mx::array& x, int64_t from, int64_t stride, int count, float* out) {
  if (x.dtype() == mx::float32) {
    const float* in = x.data<float>() + from;
    for (int i = 0; i < count; ++i) out[i] = in[i * stride];
  } else if (x.dtype() == mx::bfloat16) {  // bfloat16 is float32's upper half
    const uint16_t* in = static_cast<const uint16_t*>(x.data<void>()) + from;
    for (int i = 0; i < count; ++i) {
      const uint32_t bits = static_cast<uint32_t>(in[i * stride]) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
    const ScaleType type = scale_type(x.dtype());
    for (int i = 0; i < count; ++i) out[i] = scale_at(x.data<void>(), type, from + i * stride);
  }
}

}  // namespace

const float* float_rows(const mx::array& x, std::vector<float>& copy) {
  if (x.dtype() == mx::float32 && x.flags().row_contiguous) {
    return x.data<float>();
  }
  copy.resize(x.size());
  if (x.size() == 0) return copy.data();
  // Row by row: a row's offset from the outer dimensions' strides (a broadcast row has
  // stride 0: a mixture's token repeated for each of its experts), its values converted
  // in one loop.
  const auto& shape = x.shape();
  const auto& strides = x.strides();
  const int ndim = static_cast<int>(shape.size());
  const int width = ndim ? shape.back() : 1;
  const int64_t step = ndim ? strides.back() : 1;
  const size_t rows = x.size() / width;
  for (size_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    size_t rest = r;
    for (int d = ndim - 2; d >= 0; --d) {
      offset += static_cast<int64_t>(rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    row_as_float(x, offset, step, width, copy.data() + r * width);
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
