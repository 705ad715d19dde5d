// A Llama decoder layer as two MLX primitives, so that a decode step builds 2 graph nodes
// per layer instead of about 20 (on the CPU the framework's per-operation cost was two
// thirds of a decode step); prefill chunks take them too (their softmax and SiLU are
// vectorized here, scalar in MLX's CPU backend on x86). Between them the caller runs the KV
// cache's own update (mlx-lm's update_and_fetch), so every cache kind keeps its logic.
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mlxlab {

namespace mx = mlx::core;

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float eps, rope_base, rope_scale;
  bool rope_traditional;
  bool qkv_bias = false;  // Qwen2's: q, k and v projections with an additive bias
  float qk_norm_eps = 0;  // above 0, Qwen3's: each head of q and k RMS-normed before RoPE
};

// Inputs: x (B, L, D), positions (B,) int32 (token i of row b at positions[b] + i), then
// the input norm's weight and (w, scales, biases) of q, k and v; then, as the attention
// says, the three projections' additive biases, and the q and k head norms' weights.
// Outputs q (B, H, L, hd) float32, k and v (B, Hkv, L, hd) in the cache's type (float32 or
// float16), RoPE'd.
class DecodeQKV : public mx::Primitive {
 public:
  DecodeQKV(mx::Stream stream, Attention attention, std::vector<int> quant)
      : mx::Primitive(stream), a_(attention), quant_(std::move(quant)) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override;
  const char* name() const override { return "MlxlabDecodeQKV"; }

 private:
  Attention a_;
  std::vector<int> quant_;  // (group size, bits) of q, k, v
};

// Inputs: h (B, L, D) the layer's input, q (B, H, L, hd), keys and values (B, Hkv, S, hd)
// as the cache returns them, the post-attention norm's weight, (w, scales, biases) of o,
// gate, up and down, then the mask (B or 1, 1, L or 1, S) when there is one. Query i
// attends to the keys up to S - L + i, as a one-token step at its position does.
// Output: the layer's output (B, L, D), float32.
class DecodeRest : public mx::UnaryPrimitive {
 public:
  DecodeRest(mx::Stream stream, float eps, float scale, std::vector<int> quant)
      : mx::UnaryPrimitive(stream), eps_(eps), scale_(scale), quant_(std::move(quant)) {}
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override;
  const char* name() const override { return "MlxlabDecodeRest"; }

 private:
  float eps_, scale_;
  std::vector<int> quant_;  // (group size, bits) of o, gate, up, down
};

std::vector<mx::array> decode_qkv(const mx::array& x, const mx::array& positions,
                                  const std::vector<mx::array>& weights,
                                  const std::vector<int>& quant, const Attention& attention,
                                  mx::Dtype kv_dtype = mx::float32);

mx::array decode_rest(const mx::array& h, const mx::array& q, const mx::array& keys,
                      const mx::array& values, const std::vector<mx::array>& weights,
                      const std::vector<int>& quant, const std::optional<mx::array>& mask,
                      float eps, float scale);

}  // namespace mlxlab
