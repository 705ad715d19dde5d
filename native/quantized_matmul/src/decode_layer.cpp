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

// Each of M rows (D wide) RMS-normed by `weight` (any float type), into out (in place when
// out is x).
void norm_rows(const mx::array& weight, float eps, int M, int D, const float* x, float* out) {
  thread_local std::vector<float> copy;
  const float* w = float_rows(weight, copy);
  for (int m = 0; m < M; ++m) rms_norm(x + static_cast<int64_t>(m) * D, w, D, eps, out + static_cast<int64_t>(m) * D);
}

// Columns [from, from + width) of M rows `stride` wide, into `out` (M x width).
void columns(const float* rows, int M, int stride, int from, int width, std::vector<float>& out) {
  out.resize(static_cast<size_t>(M) * width);
  for (int m = 0; m < M; ++m) {
    const float* src = rows + static_cast<int64_t>(m) * stride + from;
    std::copy(src, src + width, out.data() + static_cast<int64_t>(m) * width);
  }
}

void run_qkv(const std::vector<mx::array>& in, std::vector<mx::array>& out, const Attention& a,
             const std::vector<int>& quant) {
  thread_local std::vector<float> x_copy, normed, q, k, v, fused, freqs_copy;
  const int B = in[0].shape(0), L = in[0].shape(1), D = in[0].shape(2), M = B * L;
  const float* x = float_rows(in[0], x_copy);
  int at = 2;  // the next input
  if (a.input_norm) {
    normed.resize(static_cast<size_t>(M) * D);
    norm_rows(in[at++], a.eps, M, D, x, normed.data());
    x = normed.data();
  }
  const int q_row = a.n_heads * a.head_dim, kv_row = a.n_kv_heads * a.head_dim;
  if (a.fused_qkv) {
    const int width = q_row + 2 * kv_row;
    fused.resize(static_cast<size_t>(M) * width);
    project(in, at, &quant[0], x, M, fused.data());
    columns(fused.data(), M, width, 0, q_row, q);
    columns(fused.data(), M, width, q_row, kv_row, k);
    columns(fused.data(), M, width, q_row + kv_row, kv_row, v);
    at += 3;
  } else {
    q.resize(static_cast<size_t>(M) * q_row);
    k.resize(static_cast<size_t>(M) * kv_row);
    v.resize(static_cast<size_t>(M) * kv_row);
    project(in, at, &quant[0], x, M, q.data());
    project(in, at + 3, &quant[2], x, M, k.data());
    project(in, at + 6, &quant[4], x, M, v.data());
    at += 9;
  }
  if (a.qkv_bias) {
    add_bias(in[at], M, q_row, q.data());
    add_bias(in[at + 1], M, kv_row, k.data());
    add_bias(in[at + 2], M, kv_row, v.data());
    at += 3;
  }
  if (a.qk_norm_eps > 0) {
    // Each head alone, or (OLMo 2) each token's heads as one vector.
    const int q_width = a.qk_norm_full ? q_row : a.head_dim;
    const int k_width = a.qk_norm_full ? kv_row : a.head_dim;
    norm_rows(in[at], a.qk_norm_eps, M * q_row / q_width, q_width, q.data(), q.data());
    norm_rows(in[at + 1], a.qk_norm_eps, M * kv_row / k_width, k_width, k.data(), k.data());
    at += 2;
  }
  Rope r{a.rope_dims, a.rope_base, a.rope_scale, a.rope_traditional, nullptr, a.rope_mscale};
  if (a.rope_freqs) r.inv_freqs = float_rows(in[at++], freqs_copy);
  for (int m = 0; m < M; ++m) {
    // Token i of row b sits at the row's offset + i, as MLX's RoPE with an offset array.
    const float position = position_of(in[1], m / L) + static_cast<float>(m % L);
    rope(q.data() + m * q_row, a.n_heads, a.head_dim, position, r);
    rope(k.data() + m * kv_row, a.n_kv_heads, a.head_dim, position, r);
  }
  to_heads(q, B, L, a.n_heads, a.head_dim, out[0]);
  to_heads(k, B, L, a.n_kv_heads, a.head_dim, out[1]);
  to_heads(v, B, L, a.n_kv_heads, a.head_dim, out[2]);
  release_if_long(M, x_copy, normed, q, k, v, fused);
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

// Where DecodeRest's inputs sit, for a feedforward's kind (-1: not there).
struct RestLayout {
  int post_attention_norm = -1, pre_norm = -1, post_norm = -1, o, gate, up = -1, down, mask;

  explicit RestLayout(const Feedforward& f) {
    int at = 4;  // after h, q, keys, values
    if (f.post_attention_norm) post_attention_norm = at++;
    if (f.pre_norm) pre_norm = at++;
    if (f.post_norm) post_norm = at++;
    o = at;
    if (!f.mlp) {
      gate = down = -1;
      mask = o + 3;
      return;
    }
    gate = o + 3;
    if (!f.fused_gate_up) up = gate + 3;
    down = (f.fused_gate_up ? gate : up) + 3;
    mask = down + 3;
  }
};

// Query i of row b's mask over the keys (a mask of one query row serves them all).
MaskRow mask_row(const std::vector<mx::array>& in, int at, int row, int query) {
  if (static_cast<int>(in.size()) <= at) return {};
  const auto& mask = in[at];
  const auto& st = mask.strides();
  const int64_t offset = (mask.shape(0) == 1 ? 0 : row * st[0]) + (mask.shape(2) == 1 ? 0 : query * st[2]);
  if (mask.dtype() == mx::bool_) return {mask.data<bool>() + offset, 1, st[3]};
  return {mask.data<float>() + offset, 2, st[3]};
}

// y += scale * branch, M x D (the product skipped where scale is 1, as the block skips it).
void add_branch(float* y, float* branch, int n, float scale) {
  if (scale != 1.0f) {
    for (int i = 0; i < n; ++i) branch[i] *= scale;
  }
  add_into(y, branch, n);
}

void run_rest(const std::vector<mx::array>& in, mx::array& out, const Feedforward& f,
              const std::vector<int>& quant) {
  thread_local std::vector<float> h_copy, keys_copy, values_copy, attended, projected, normed,
      gate, up;
  thread_local std::vector<KVRow> row_keys, row_values;
  keys_copy.clear();
  values_copy.clear();
  const RestLayout at(f);
  const auto &h_in = in[0], &q = in[1], &keys = in[2];
  const int B = h_in.shape(0), L = h_in.shape(1), D = h_in.shape(2), M = B * L;
  const int H = q.shape(1), hd = q.shape(3), Hkv = keys.shape(1), S = keys.shape(2);
  const int F = f.mlp ? in[at.gate].shape(0) / (f.fused_gate_up ? 2 : 1) : 0;
  attended.resize(static_cast<size_t>(M) * H * hd);
  row_keys.clear();
  row_values.clear();
  for (int b = 0; b < B; ++b) {
    row_keys.push_back(kv_row(keys, b, keys_copy));
    row_values.push_back(kv_row(in[3], b, values_copy));
  }
  // One query head of one token a task: each is computed alone, whichever thread runs it.
  // (Through plain pointers: in the lambda, a thread_local's name is the running thread's.)
  const float* queries = q.data<float>();
  const KVRow *keys_of = row_keys.data(), *values_of = row_values.data();
  float* attended_at = attended.data();
  const int repeats = H / Hkv, tasks = M * H, mask_at = at.mask;
  const float scale = f.scale;
  const int64_t work = static_cast<int64_t>(tasks) * S * hd;
  parallel_for(tasks, work < kAttentionParallelMin ? 1 : thread_count(), 1, [&](int first, int last) {
    for (int task = first; task < last; ++task) {
      const int b = task / (L * H), i = (task / H) % L, h = task % H, kv = h / repeats;
      const KVRow &k = keys_of[b], &v = values_of[b];
      // Query i sees the keys up to its own position: what a one-token step there sees.
      attend(queries + ((static_cast<int64_t>(b) * H + h) * L + i) * hd, hd, S - L + i + 1,
             k.at_head(kv), v.at_head(kv), mask_row(in, mask_at, b, i), scale,
             attended_at + ((static_cast<int64_t>(b) * L + i) * H + h) * hd);
    }
  });
  // h + o_proj(attention) (its norm first where the block has one), then the MLP's branch.
  float* y = out.data<float>();
  const int64_t MD = static_cast<int64_t>(M) * D;
  projected.resize(MD);
  project(in, at.o, &quant[0], attended.data(), M, projected.data());
  if (at.post_attention_norm >= 0) {
    norm_rows(in[at.post_attention_norm], f.eps, M, D, projected.data(), projected.data());
  }
  const float* h = float_rows(h_in, h_copy);
  std::copy(h, h + MD, y);
  add_branch(y, projected.data(), MD, f.residual_scale);
  if (!f.mlp) {
    release_if_long(M, h_copy, keys_copy, values_copy, attended, projected);
    return;
  }
  const float* mlp_in = y;
  if (at.pre_norm >= 0) {
    normed.resize(MD);
    norm_rows(in[at.pre_norm], f.eps, M, D, y, normed.data());
    mlp_in = normed.data();
  }
  if (f.fused_gate_up) {
    up.resize(static_cast<size_t>(M) * 2 * F);  // each row's gate, then its up
    project(in, at.gate, &quant[2], mlp_in, M, up.data());
    gate.resize(static_cast<size_t>(M) * F);
    for (int m = 0; m < M; ++m) {
      float* gate_m = gate.data() + static_cast<int64_t>(m) * F;
      const float* both = up.data() + static_cast<int64_t>(m) * 2 * F;
      std::copy(both, both + F, gate_m);
      gated(gate_m, both + F, F, f.activation);
    }
  } else {
    gate.resize(static_cast<size_t>(M) * F);
    up.resize(static_cast<size_t>(M) * F);
    project(in, at.gate, &quant[2], mlp_in, M, gate.data());
    project(in, at.up, &quant[4], mlp_in, M, up.data());
    for (int m = 0; m < M; ++m) gated(gate.data() + m * F, up.data() + m * F, F, f.activation);
  }
  project(in, at.down, &quant[f.fused_gate_up ? 4 : 6], gate.data(), M, projected.data());
  if (at.post_norm >= 0) {
    norm_rows(in[at.post_norm], f.eps, M, D, projected.data(), projected.data());
  }
  add_branch(y, projected.data(), MD, f.residual_scale);
  release_if_long(M, h_copy, keys_copy, values_copy, attended, projected, normed, gate, up);
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
  encoder.dispatch([in = weak(inputs), out = mx::array::unsafe_weak_copy(out), f = f_,
                    quant = quant_]() mutable { run_rest(in, out, f, quant); });
}

void DecodeRest::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("decode layer: runs on the CPU only");
}

std::vector<mx::array> decode_qkv(const mx::array& x, const mx::array& positions,
                                  const std::vector<mx::array>& weights,
                                  const std::vector<int>& quant, const Attention& attention,
                                  mx::Dtype kv_dtype) {
  check_quant(quant, attention.fused_qkv ? 2 : 6);
  if (kv_dtype != mx::float32 && kv_dtype != mx::float16) {
    throw std::invalid_argument("decode_qkv: keys and values are float32 or float16");
  }
  const size_t expected = (attention.input_norm ? 1 : 0) + (attention.fused_qkv ? 3 : 9) +
                          (attention.qkv_bias ? 3 : 0) + (attention.qk_norm_eps > 0 ? 2 : 0) +
                          (attention.rope_freqs ? 1 : 0);
  if (x.ndim() != 3 || weights.size() != expected) {
    throw std::invalid_argument(
        "decode_qkv: x must be (B, L, D), weights the input norm (where there is one), the "
        "(w, s, b) of q, k and v or of the fused projection, then the q/k/v biases, the q/k "
        "norms and RoPE's inverse frequencies where the attention has them");
  }
  if (attention.fused_qkv && attention.qkv_bias) {
    throw std::invalid_argument("decode_qkv: a fused q/k/v projection takes no biases here");
  }
  const int rotated = attention.rope_dims > 0 ? attention.rope_dims : attention.head_dim;
  if (rotated > attention.head_dim || rotated % 2 != 0 ||
      (attention.rope_freqs && static_cast<int>(weights.back().size()) != rotated / 2)) {
    throw std::invalid_argument("decode_qkv: RoPE rotates an even part of each head, with one "
                                "inverse frequency a pair");
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
                      const Feedforward& feedforward) {
  const RestLayout at(feedforward);
  check_quant(quant, !feedforward.mlp ? 2 : feedforward.fused_gate_up ? 6 : 8);
  if (!feedforward.mlp && (feedforward.pre_norm || feedforward.post_norm)) {
    throw std::invalid_argument("decode_rest: without the MLP, no norm around it");
  }
  const size_t expected = at.mask - 4;
  if (h.ndim() != 3 || q.ndim() != 4 || q.shape(2) != h.shape(1) || keys.ndim() != 4 ||
      values.shape() != keys.shape() || keys.shape(2) < h.shape(1) || weights.size() != expected) {
    throw std::invalid_argument("decode_rest: h (B, L, D), q (B, H, L, hd), keys and values "
                                "(B, Hkv, S >= L, hd), " + std::to_string(expected) + " weights");
  }
  if (keys.dtype() != values.dtype() || !is_float(keys.dtype())) {
    throw std::invalid_argument("decode_rest: keys and values must be one float type");
  }
  if (feedforward.activation < 0 || feedforward.activation > 2) {
    throw std::invalid_argument("decode_rest: activation 0 (SiLU), 1 (GELU, tanh) or 2 (GELU)");
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
                   std::make_shared<DecodeRest>(stream, feedforward, quant), inputs);
}

}  // namespace mlxlab
