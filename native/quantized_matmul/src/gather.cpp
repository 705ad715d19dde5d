// Expert-grouped quantized matmul for mixture-of-experts layers (mx.gather_qmm's job with
// transpose=True, affine): each row's product with the expert its index names, the rows
// grouped by expert so that each expert's weights are read once a call (a prefill's tokens
// routed to one expert become one matmul of many rows, on the same kernels as a Linear).
#include "gather.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "array_io.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxlab {

namespace {

// Row r's expert. The indices may be a strided view (a slice of argpartition's output,
// flattened without a copy), so their stride counts.
int64_t index_at(const mx::array& indices, int64_t r) {
  const int64_t at = r * indices.strides()[0];
  if (indices.dtype() == mx::uint32) return indices.data<uint32_t>()[at];
  if (indices.dtype() == mx::int64) return indices.data<int64_t>()[at];
  return indices.data<int32_t>()[at];
}

void run_gather(const mx::array& x_in, const mx::array& w, const mx::array& scales,
                const mx::array& biases, const mx::array& indices, mx::array& out, int group_size,
                int bits) {
  thread_local std::vector<float> x_copy, rows, products, y_copy;
  const int E = w.shape(0), N = w.shape(1), K = w.shape(2) * 32 / bits;
  const int R = indices.size(), M = x_in.shape(-2);
  const float* x = float_rows(x_in, x_copy);
  float* y = out.dtype() == mx::float32 ? out.data<float>() : (y_copy.resize(out.size()), y_copy.data());
  // Rows by expert: a counting sort keeps each expert's rows in their order.
  std::vector<int> count(E + 1, 0), order(R);
  for (int r = 0; r < R; ++r) {
    const int64_t e = index_at(indices, r);
    if (e < 0 || e >= E) throw std::out_of_range("gather_qmm: an expert index out of range");
    ++count[e + 1];
  }
  for (int e = 0; e < E; ++e) count[e + 1] += count[e];
  std::vector<int> next(count.begin(), count.end() - 1);
  for (int r = 0; r < R; ++r) order[next[index_at(indices, r)]++] = r;
  const int64_t w_expert = static_cast<int64_t>(N) * w.shape(2) * 4;  // bytes of packed words
  const int64_t s_expert = static_cast<int64_t>(N) * (K / group_size);
  const size_t s_size = mx::size_of(scales.dtype());
  const int64_t MK = static_cast<int64_t>(M) * K, MN = static_cast<int64_t>(M) * N;
  rows.resize(static_cast<size_t>(R) * MK);  // x's rows in expert order
  products.resize(static_cast<size_t>(R) * MN);
  for (int i = 0; i < R; ++i) {
    const float* src = x + order[i] * MK;
    std::copy(src, src + MK, rows.data() + i * MK);
  }
  // One problem an expert with rows, all run in one loop over the threads: a decode step's
  // eight experts are one wake-up of the workers where they were eight.
  std::vector<Problem> problems;
  for (int e = 0; e < E; ++e) {
    const int first = count[e], rows_of = count[e + 1] - first;
    if (rows_of == 0) continue;
    Problem p;
    p.x = rows.data() + first * MK;
    p.w = w.data<uint8_t>() + e * w_expert;
    p.scales = static_cast<const char*>(scales.data<void>()) + e * s_expert * s_size;
    p.biases = static_cast<const char*>(biases.data<void>()) + e * s_expert * s_size;
    p.scale_type = scale_type(scales.dtype());
    p.y = products.data() + first * MN;
    p.M = rows_of * M;
    p.N = N;
    p.K = K;
    p.group_size = group_size;
    p.bits = bits;
    problems.push_back(p);
  }
  compute_many(problems.data(), static_cast<int>(problems.size()));
  for (int i = 0; i < R; ++i) {
    const float* src = products.data() + i * MN;
    std::copy(src, src + MN, y + order[i] * MN);
  }
  if (out.dtype() != mx::float32) store(y_copy, out);
  if (R * M > 64) {
    std::vector<float>().swap(rows);
    std::vector<float>().swap(products);
  }
}

}  // namespace

void GatherQuantizedMatmul::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& input : inputs) encoder.set_input_array(input);
  encoder.set_output_array(out);
  std::vector<mx::array> in;
  for (const auto& input : inputs) in.push_back(mx::array::unsafe_weak_copy(input));
  encoder.dispatch([in = std::move(in), out = mx::array::unsafe_weak_copy(out),
                    group_size = group_size_, bits = bits_]() mutable {
    run_gather(in[0], in[1], in[2], in[3], in[4], out, group_size, bits);
  });
}

void GatherQuantizedMatmul::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("gather_qmm: runs on the CPU only");
}

mx::array gather_quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                                  const mx::array& biases, const mx::array& indices,
                                  int group_size, int bits) {
  if ((bits != 4 && bits != 8) || (group_size != 32 && group_size != 64 && group_size != 128)) {
    throw std::invalid_argument("gather_qmm: 4 or 8 bits, groups of 32, 64 or 128");
  }
  if (w.dtype() != mx::uint32 || w.ndim() != 3 || scales.ndim() != 3 ||
      scales.shape() != biases.shape() || scales.dtype() != biases.dtype() ||
      !w.flags().row_contiguous || !scales.flags().row_contiguous ||
      !biases.flags().row_contiguous) {
    throw std::invalid_argument(
        "gather_qmm: w (experts, N, packed) uint32, scales and biases alike, row-contiguous");
  }
  const int K = w.shape(2) * 32 / bits;
  if (x.ndim() != 3 || x.shape(2) != K || !is_float(x.dtype()) ||
      scales.shape(2) * group_size != K || indices.ndim() != 1 ||
      indices.size() != static_cast<size_t>(x.shape(0)) ||
      (indices.dtype() != mx::uint32 && indices.dtype() != mx::int32 &&
       indices.dtype() != mx::int64)) {
    throw std::invalid_argument("gather_qmm: x (R, M, " + std::to_string(K) +
                                ") float, indices (R,) integers");
  }
  const auto dtype = mx::promote_types(x.dtype(), scales.dtype());
  auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array({x.shape(0), x.shape(1), w.shape(1)}, dtype,
                   std::make_shared<GatherQuantizedMatmul>(stream, group_size, bits),
                   {x, w, scales, biases, indices});
}

}  // namespace mlxlab
