#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "decode_layer.h"
#include "gather.h"

#include "kernels.h"
#include "primitive.h"
#include "thread_pool.h"

namespace nb = nanobind;
namespace mx = mlx::core;
using namespace nb::literals;

NB_MODULE(_qmm, m) {
  m.doc() = "MLX Lab's AVX2/FMA quantized matmul for MLX's CPU backend";
  m.def("quantized_matmul", &mlxlab::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a,
        "x @ dequantize(w, scales, biases, group_size, bits).T (affine, 4 or 8 bits).");
  m.def("blas_min_rows", &mlxlab::blas_min_rows);
  m.def("set_blas_min_rows", &mlxlab::set_blas_min_rows, "rows"_a);
  m.def("blas_found", &mlxlab::blas_found);
  m.def("thread_count", &mlxlab::thread_count);
  m.def("set_thread_count", &mlxlab::set_thread_count, "threads"_a);
  m.def("parallel_min_work", &mlxlab::parallel_min_work);
  m.def("set_parallel_min_work", &mlxlab::set_parallel_min_work, "work"_a);
  m.def("spin_microseconds", &mlxlab::spin_microseconds);
  m.def("set_spin_microseconds", &mlxlab::set_spin_microseconds, "microseconds"_a);
  m.def("backs_off_after", &mlxlab::backs_off_after, "worker_us"_a, "loops"_a,
        "For the tests: whether a worker this slow mid-chunk sends the pool to one thread.");
  m.def("kernel_name", &mlxlab::kernel_name);
  m.def("avx512_allowed", &mlxlab::avx512_allowed);
  m.def("set_avx512_allowed", &mlxlab::set_avx512_allowed, "on"_a);
  m.def(
      "decode_qkv",
      [](const mx::array& x, const mx::array& positions, const std::vector<mx::array>& weights,
         const std::vector<int>& quant, int n_heads, int n_kv_heads, int head_dim, float eps,
         float rope_base, float rope_scale, bool rope_traditional, bool kv_float16,
         bool qkv_bias, float qk_norm_eps, bool qk_norm_full, int rope_dims, float rope_mscale,
         bool rope_freqs, bool input_norm, bool fused_qkv) {
        mlxlab::Attention a{n_heads, n_kv_heads, head_dim, eps, rope_base, rope_scale,
                            rope_traditional};
        a.qkv_bias = qkv_bias;
        a.qk_norm_eps = qk_norm_eps;
        a.qk_norm_full = qk_norm_full;
        a.rope_dims = rope_dims;
        a.rope_mscale = rope_mscale;
        a.rope_freqs = rope_freqs;
        a.input_norm = input_norm;
        a.fused_qkv = fused_qkv;
        return mlxlab::decode_qkv(x, positions, weights, quant, a,
                                  kv_float16 ? mx::float16 : mx::float32);
      },
      "x"_a, "positions"_a, "weights"_a, "quant"_a, "n_heads"_a, "n_kv_heads"_a, "head_dim"_a,
      "eps"_a, "rope_base"_a, "rope_scale"_a, "rope_traditional"_a, "kv_float16"_a = false,
      "qkv_bias"_a = false, "qk_norm_eps"_a = 0.0f, "qk_norm_full"_a = false, "rope_dims"_a = 0,
      "rope_mscale"_a = 1.0f, "rope_freqs"_a = false,
      "input_norm"_a = true, "fused_qkv"_a = false,
      "A decode step's input norm, q/k/v projections (with their biases when qkv_bias), the "
      "q and k norms (when qk_norm_eps > 0) and RoPE: (q, k, v); k and v float16 when "
      "kv_float16. decode_layer.h says what each option adds.");
  m.def(
      "decode_rest",
      [](const mx::array& h, const mx::array& q, const mx::array& keys, const mx::array& values,
         const std::vector<mx::array>& weights, const std::vector<int>& quant,
         const std::optional<mx::array>& mask, float eps, float scale,
         bool post_attention_norm, bool pre_norm, bool post_norm, float residual_scale,
         int activation, bool fused_gate_up, bool mlp) {
        mlxlab::Feedforward f{eps, scale};
        f.post_attention_norm = post_attention_norm;
        f.pre_norm = pre_norm;
        f.post_norm = post_norm;
        f.residual_scale = residual_scale;
        f.activation = activation;
        f.fused_gate_up = fused_gate_up;
        f.mlp = mlp;
        return mlxlab::decode_rest(h, q, keys, values, weights, quant, mask, f);
      },
      "h"_a, "q"_a, "keys"_a, "values"_a, "weights"_a, "quant"_a, "mask"_a.none(), "eps"_a,
      "scale"_a, "post_attention_norm"_a = false, "pre_norm"_a = true,
      "post_norm"_a = false, "residual_scale"_a = 1.0f, "activation"_a = 0,
      "fused_gate_up"_a = false, "mlp"_a = true,
      "A decode step's attention, o projection, residual and MLP: the layer's output (with "
      "mlp=False, h + o's branch: the block's own MLP follows).");
  m.def("gather_quantized_matmul", &mlxlab::gather_quantized_matmul, "x"_a, "w"_a, "scales"_a,
        "biases"_a, "indices"_a, "group_size"_a, "bits"_a,
        "x[r] @ dequantize(w[indices[r]]).T for each r of x (R, M, K): a mixture of experts' "
        "gather_qmm (transpose, affine), the rows grouped by expert.");
  m.def("int8_activations", &mlxlab::int8_activations);
  m.def("set_int8_activations", &mlxlab::set_int8_activations, "on"_a);
  m.def("int16_activations", &mlxlab::int16_activations);
  m.def("set_int16_activations", &mlxlab::set_int16_activations, "on"_a);
}
