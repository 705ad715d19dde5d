#include "decode_layer.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "array_io.h"
#include "decode_math.h"
#include "kernels.h"
#include "thread_pool.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxlab {

namespace {

// Query heads x keys x head size below which attention stays on one thread.
constexpr int64_t kAttentionParallelMin = 65536;
// Rows (tokens) above which a call frees its buffers when done: a prefill chunk's take
// megabytes (rows x 1536 floats each, thread-local), a decode step's are reused.
constexpr int kKeptRows = 64;

template <typename... Buffers>
void release_if_long(int rows, Buffers&... buffers) {
  if (rows > kKeptRows) (std::vector<float>().swap(buffers), ...);
}

// The inputs of DecodeRest, in order.
enum RestInput { kH, kQ, kKeys, kValues, kPostNorm, kO = 5, kGate = 8, kUp = 11, kDown = 14, kMask = 17 };

std::vector<mx::array> weak(const std::vector<mx::array>& arrays) {
  std::vector<mx::array> copies;
  copies.reserve(arrays.size());
  for (const auto& a : arrays) copies.push_back(mx::array::unsafe_weak_copy(a));
  return copies;
}

// y (M x N) = x (M x K) @ dequantize(w).T, w, scales and biases at in[at..at + 2].
void project(const std::vector<mx::array>& in, int at, const int* quant, const float* x, int M,
             float* y) {
  const auto &w = in[at], &scales = in[at + 1], &biases = in[at + 2];
  if (!w.flags().row_contiguous || !scales.flags().row_contiguous ||
      !biases.flags().row_contiguous) {
    throw std::invalid_argument("decode layer: quantized weights must be row-contiguous");
  }
  Problem p;
  p.x = x;
  p.w = w.data<uint8_t>();
  p.scales = scales.data<void>();
  p.biases = biases.data<void>();
  p.scale_type = scale_type(scales.dtype());
  p.y = y;
  p.M = M;
  p.N = w.shape(0);
  p.K = w.shape(1) * 32 / quant[1];
  p.group_size = quant[0];
  p.bits = quant[1];
  compute(p);
}

float position_of(const mx::array& positions, int row) {
  const int at = positions.size() == 1 ? 0 : row;
  const int64_t stride = positions.ndim() == 0 ? 0 : positions.strides()[0];
  if (positions.dtype() == mx::int64) return static_cast<float>(positions.data<int64_t>()[at * stride]);
  return static_cast<float>(positions.data<int32_t>()[at * stride]);
}

// Rows of (B x L, heads x hd) into (B, heads, L, hd), as the cache and attention take them;
// into float16 rounded to nearest even, as MLX's astype rounds.
template <typename T>
void to_heads_as(const std::vector<float>& rows, int B, int L, int heads, int hd, T* out) {
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < L; ++i) {
      const float* src = rows.data() + (static_cast<int64_t>(b) * L + i) * heads * hd;
      for (int h = 0; h < heads; ++h) {
        T* dst = out + ((static_cast<int64_t>(b) * heads + h) * L + i) * hd;
        for (int d = 0; d < hd; ++d) dst[d] = static_cast<T>(src[h * hd + d]);
      }
    }
  }
}

void to_heads(const std::vector<float>& rows, int B, int L, int heads, int hd, mx::array& out) {
  if (out.dtype() == mx::float16) {
    to_heads_as(rows, B, L, heads, hd, out.data<mx::float16_t>());
  } else {
    to_heads_as(rows, B, L, heads, hd, out.data<float>());
  }
}

// Each of M rows of y (M x N) plus a projection's bias (N), read as float32.
void add_bias(const mx::array& bias, int M, int N, float* y) {
  thread_local std::vector<float> copy;
  const float* b = float_rows(bias, copy);
  for (int m = 0; m < M; ++m) add_into(y + static_cast<int64_t>(m) * N, b, N);
}

// Each of `heads` head vectors (hd wide, contiguous) RMS-normed in place by `weight` (hd).
void head_norms(const mx::array& weight, int heads, int hd, float eps, float* x) {
  thread_local std::vector<float> copy;
  const float* w = float_rows(weight, copy);
  for (int h = 0; h < heads; ++h) rms_norm(x + static_cast<int64_t>(h) * hd, w, hd, eps, x + static_cast<int64_t>(h) * hd);
}

void run_qkv(const std::vector<mx::array>& in, std::vector<mx::array>& out, const Attention& a,
             const std::vector<int>& quant) {
  thread_local std::vector<float> x_copy, norm_copy, normed, q, k, v;
  const int B = in[0].shape(0), L = in[0].shape(1), D = in[0].shape(2), M = B * L;
  const float* x = float_rows(in[0], x_copy);
  const float* weight = float_rows(in[2], norm_copy);
  normed.resize(static_cast<size_t>(M) * D);
  for (int m = 0; m < M; ++m) rms_norm(x + m * D, weight, D, a.eps, normed.data() + m * D);
  const int q_row = a.n_heads * a.head_dim, kv_row = a.n_kv_heads * a.head_dim;
  q.resize(static_cast<size_t>(M) * q_row);
  k.resize(static_cast<size_t>(M) * kv_row);
  v.resize(static_cast<size_t>(M) * kv_row);
  project(in, 3, &quant[0], normed.data(), M, q.data());
  project(in, 6, &quant[2], normed.data(), M, k.data());
  project(in, 9, &quant[4], normed.data(), M, v.data());
  int extra = 12;
  if (a.qkv_bias) {
    add_bias(in[extra], M, q_row, q.data());
    add_bias(in[extra + 1], M, kv_row, k.data());
    add_bias(in[extra + 2], M, kv_row, v.data());
    extra += 3;
  }
  if (a.qk_norm_eps > 0) {
    head_norms(in[extra], M * a.n_heads, a.head_dim, a.qk_norm_eps, q.data());
    head_norms(in[extra + 1], M * a.n_kv_heads, a.head_dim, a.qk_norm_eps, k.data());
  }
  for (int m = 0; m < M; ++m) {
    // Token i of row b sits at the row's offset + i, as MLX's RoPE with an offset array.
    const float at = position_of(in[1], m / L) + static_cast<float>(m % L);
    rope(q.data() + m * q_row, a.n_heads, a.head_dim, at, a.rope_base, a.rope_scale,
         a.rope_traditional);
    rope(k.data() + m * kv_row, a.n_kv_heads, a.head_dim, at, a.rope_base, a.rope_scale,
         a.rope_traditional);
  }
  to_heads(q, B, L, a.n_heads, a.head_dim, out[0]);
  to_heads(k, B, L, a.n_kv_heads, a.head_dim, out[1]);
  to_heads(v, B, L, a.n_kv_heads, a.head_dim, out[2]);
  release_if_long(M, x_copy, norm_copy, normed, q, k, v);
}

// One row's keys or values: the cache's own memory when float32 or float16 with contiguous
// head dimension (a slice of its buffer), else a contiguous float32 copy.
KVRow kv_row(const mx::array& kv, int row, std::vector<float>& copy) {
  const auto& st = kv.strides();
  if (kv.dtype() == mx::float32 && st[3] == 1) {
    return {kv.data<float>() + row * st[0], st[1], st[2], false};
  }
  if (kv.dtype() == mx::float16 && st[3] == 1) {
    return {kv.data<mx::float16_t>() + row * st[0], st[1], st[2], true};
  }
  if (copy.empty()) float_rows(kv, copy);
  const int64_t head = static_cast<int64_t>(kv.shape(2)) * kv.shape(3);
  return {copy.data() + row * head * kv.shape(1), head, kv.shape(3), false};
}

// Query i of row b's mask over the keys (a mask of one query row serves them all).
MaskRow mask_row(const std::vector<mx::array>& in, int row, int query) {
  if (static_cast<int>(in.size()) <= kMask) return {};
  const auto& mask = in[kMask];
  const auto& st = mask.strides();
  const int64_t at = (mask.shape(0) == 1 ? 0 : row * st[0]) + (mask.shape(2) == 1 ? 0 : query * st[2]);
  if (mask.dtype() == mx::bool_) return {mask.data<bool>() + at, 1, st[3]};
  return {mask.data<float>() + at, 2, st[3]};
}

void run_rest(const std::vector<mx::array>& in, mx::array& out, float eps, float scale,
              const std::vector<int>& quant) {
  thread_local std::vector<float> h_copy, norm_copy, keys_copy, values_copy, attended, projected,
      normed, gate, up;
  thread_local std::vector<KVRow> row_keys, row_values;
  keys_copy.clear();
  values_copy.clear();
  const auto &h_in = in[kH], &q = in[kQ], &keys = in[kKeys];
  const int B = h_in.shape(0), L = h_in.shape(1), D = h_in.shape(2), M = B * L;
  const int H = q.shape(1), hd = q.shape(3), Hkv = keys.shape(1), S = keys.shape(2);
  const int F = in[kGate].shape(0);
  attended.resize(static_cast<size_t>(M) * H * hd);
  row_keys.clear();
  row_values.clear();
  for (int b = 0; b < B; ++b) {
    row_keys.push_back(kv_row(keys, b, keys_copy));
    row_values.push_back(kv_row(in[kValues], b, values_copy));
  }
  // One query head of one token a task: each is computed alone, whichever thread runs it.
  // (Through plain pointers: in the lambda, a thread_local's name is the running thread's.)
  const float* queries = q.data<float>();
  const KVRow *keys_of = row_keys.data(), *values_of = row_values.data();
  float* attended_at = attended.data();
  const int repeats = H / Hkv, tasks = M * H;
  const int64_t work = static_cast<int64_t>(tasks) * S * hd;
  parallel_for(tasks, work < kAttentionParallelMin ? 1 : thread_count(), 1, [&](int first, int last) {
    for (int task = first; task < last; ++task) {
      const int b = task / (L * H), i = (task / H) % L, h = task % H, kv = h / repeats;
      const KVRow &k = keys_of[b], &v = values_of[b];
      // Query i sees the keys up to its own position: what a one-token step there sees.
      attend(queries + ((static_cast<int64_t>(b) * H + h) * L + i) * hd, hd, S - L + i + 1,
             k.at_head(kv), v.at_head(kv), mask_row(in, b, i), scale,
             attended_at + ((static_cast<int64_t>(b) * L + i) * H + h) * hd);
    }
  });
  // h + o_proj(attention), then + down(silu(gate) * up) of its norm: into out.
  float* y = out.data<float>();
  projected.resize(static_cast<size_t>(M) * D);
  project(in, kO, &quant[0], attended.data(), M, projected.data());
  const float* h = float_rows(h_in, h_copy);
  for (int i = 0; i < M * D; ++i) y[i] = h[i] + projected[i];
  const float* weight = float_rows(in[kPostNorm], norm_copy);
  normed.resize(static_cast<size_t>(M) * D);
  for (int m = 0; m < M; ++m) rms_norm(y + m * D, weight, D, eps, normed.data() + m * D);
  gate.resize(static_cast<size_t>(M) * F);
  up.resize(static_cast<size_t>(M) * F);
  project(in, kGate, &quant[2], normed.data(), M, gate.data());
  project(in, kUp, &quant[4], normed.data(), M, up.data());
  for (int m = 0; m < M; ++m) silu_mul(gate.data() + m * F, up.data() + m * F, F);
  project(in, kDown, &quant[6], gate.data(), M, projected.data());
  add_into(y, projected.data(), M * D);
  release_if_long(M, h_copy, norm_copy, keys_copy, values_copy, attended, projected, normed, gate,
                  up);
}

void check_quant(const std::vector<int>& quant, size_t expected) {
  if (quant.size() != expected) {
    throw std::invalid_argument("decode layer: expected " + std::to_string(expected) +
                                " (group size, bits) values");
  }
  for (size_t i = 0; i < quant.size(); i += 2) {
    if ((quant[i] != 32 && quant[i] != 64 && quant[i] != 128) ||
        (quant[i + 1] != 4 && quant[i + 1] != 8)) {
      throw std::invalid_argument("decode layer: group size 32/64/128 and 4/8 bits only");
    }
  }
}

}  // namespace

void DecodeQKV::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& i : inputs) encoder.set_input_array(i);
  for (auto& o : outputs) encoder.set_output_array(o);
  encoder.dispatch([in = weak(inputs), out = weak(outputs), a = a_, quant = quant_]() mutable {
    run_qkv(in, out, a, quant);
  });
}

void DecodeQKV::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("decode layer: runs on the CPU only");
}

void DecodeRest::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& i : inputs) encoder.set_input_array(i);
  encoder.set_output_array(out);
  encoder.dispatch([in = weak(inputs), out = mx::array::unsafe_weak_copy(out), eps = eps_,
                    scale = scale_, quant = quant_]() mutable { run_rest(in, out, eps, scale, quant); });
}

void DecodeRest::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("decode layer: runs on the CPU only");
}

std::vector<mx::array> decode_qkv(const mx::array& x, const mx::array& positions,
                                  const std::vector<mx::array>& weights,
                                  const std::vector<int>& quant, const Attention& attention,
                                  mx::Dtype kv_dtype) {
  check_quant(quant, 6);
  if (kv_dtype != mx::float32 && kv_dtype != mx::float16) {
    throw std::invalid_argument("decode_qkv: keys and values are float32 or float16");
  }
  const size_t expected = 10 + (attention.qkv_bias ? 3 : 0) + (attention.qk_norm_eps > 0 ? 2 : 0);
  if (x.ndim() != 3 || weights.size() != expected) {
    throw std::invalid_argument(
        "decode_qkv: x must be (B, L, D), weights norm + 3 x (w, s, b), then the q/k/v "
        "biases and the q/k head norms where the attention has them");
  }
  if (positions.dtype() != mx::int32 && positions.dtype() != mx::int64) {
    throw std::invalid_argument("decode_qkv: positions must be int32 or int64");
  }
  const int B = x.shape(0), L = x.shape(1);
  std::vector<mx::array> inputs = {x, positions};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  const auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array::make_arrays(
      {{B, attention.n_heads, L, attention.head_dim},
       {B, attention.n_kv_heads, L, attention.head_dim},
       {B, attention.n_kv_heads, L, attention.head_dim}},
      {mx::float32, kv_dtype, kv_dtype},
      std::make_shared<DecodeQKV>(stream, attention, quant), inputs);
}

mx::array decode_rest(const mx::array& h, const mx::array& q, const mx::array& keys,
                      const mx::array& values, const std::vector<mx::array>& weights,
                      const std::vector<int>& quant, const std::optional<mx::array>& mask,
                      float eps, float scale) {
  check_quant(quant, 8);
  if (h.ndim() != 3 || q.ndim() != 4 || q.shape(2) != h.shape(1) || keys.ndim() != 4 ||
      values.shape() != keys.shape() || keys.shape(2) < h.shape(1) || weights.size() != 13) {
    throw std::invalid_argument("decode_rest: h (B, L, D), q (B, H, L, hd), keys and values "
                                "(B, Hkv, S >= L, hd), 13 weights");
  }
  if (keys.dtype() != values.dtype() || !is_float(keys.dtype())) {
    throw std::invalid_argument("decode_rest: keys and values must be one float type");
  }
  if (mask && (mask->ndim() != 4 || mask->shape(-1) != keys.shape(2) ||
               (mask->shape(2) != 1 && mask->shape(2) != h.shape(1)) ||
               (mask->dtype() != mx::bool_ && mask->dtype() != mx::float32))) {
    throw std::invalid_argument("decode_rest: mask must be (B, 1, L or 1, S), bool or float32");
  }
  std::vector<mx::array> inputs = {h, q, keys, values};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  if (mask) inputs.push_back(*mask);
  const auto stream = mx::default_stream(mx::Device::cpu);
  return mx::array(h.shape(), mx::float32,
                   std::make_shared<DecodeRest>(stream, eps, scale, quant), inputs);
}

}  // namespace mlxlab
