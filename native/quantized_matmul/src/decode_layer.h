// A decoder layer as two MLX primitives, so that a decode step builds 2 graph nodes per
// layer instead of about 20 (on the CPU the framework's per-operation cost was two thirds of
// a decode step); prefill chunks take them too (their softmax and activations are
// vectorized here, scalar in MLX's CPU backend on x86). Between them the caller runs the KV
// cache's own update (mlx-lm's update_and_fetch), so every cache kind keeps its logic.
// Llama's layer is the plain case; the fields of Attention and Feedforward add what the
// other families' layers compute (fused_decode.py's Shape reads them from a block).
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mlxlab {

namespace mx = mlx::core;

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float eps, rope_base, rope_scale;
  bool rope_traditional;
  bool qkv_bias = false;      // Qwen2's: q, k and v projections with an additive bias
  float qk_norm_eps = 0;      // above 0: q and k RMS-normed before RoPE (Qwen3, Gemma 3)
  bool qk_norm_full = false;  // OLMo 2's: that norm across all heads, not each head
  int rope_dims = 0;          // the rotated part of each head (0: all; less: partial rotary)
  float rope_mscale = 1;      // YaRN's and LongRoPE's scale of the rotated part
  bool rope_freqs = false;    // the inverse frequencies as an input (Llama 3, YaRN, LongRoPE)
  bool input_norm = true;     // false: OLMo 2's blocks, normed after attention instead
  bool fused_qkv = false;     // Phi-3's one projection for q, k and v
};

// Inputs: x (B, L, D), positions (B,) int32 (token i of row b at positions[b] + i), then
// the input norm's weight (where there is one) and (w, scales, biases) of q, k and v (or
// of the one fused projection); then, as the attention says, the projections' additive
// biases, the q and k norms' weights, and the table of RoPE's inverse frequencies.
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
  std::vector<int> quant_;  // (group size, bits) of q, k, v (or of the fused projection)
};

// What follows attention: h + o(attention), then h + down(act(gate) * up) of its norm.
struct Feedforward {
  float eps, scale;                  // the norms' epsilon, attention's scale
  bool post_attention_norm = false;  // Gemma 3's, OLMo 2's: o's output normed, then added
  bool pre_norm = true;              // the MLP's input normed (false: OLMo 2)
  bool post_norm = false;            // the MLP's output normed, then added (Gemma 3, OLMo 2)
  float residual_scale = 1;          // Granite's: both branches scaled before they are added
  int activation = 0;                // 0 SiLU, 1 GELU's tanh approximation, 2 GELU
  bool fused_gate_up = false;        // Phi-3's one projection for gate and up
  bool mlp = true;                   // false: the block's own MLP follows (a mixture of
                                     // experts'); the output is h + o's branch alone
};

// Inputs: h (B, L, D) the layer's input, q (B, H, L, hd), keys and values (B, Hkv, S, hd)
// as the cache returns them, the weights of the norms the feedforward has (post-attention,
// pre-MLP, post-MLP, in that order), (w, scales, biases) of o, gate and up (or the fused
// gate_up) and down, then the mask (B or 1, 1, L or 1, S) when there is one. Query i
// attends to the keys up to S - L + i, as a one-token step at its position does.
// Output: the layer's output (B, L, D), float32.
class DecodeRest : public mx::UnaryPrimitive {
 public:
  DecodeRest(mx::Stream stream, Feedforward feedforward, std::vector<int> quant)
      : mx::UnaryPrimitive(stream), f_(feedforward), quant_(std::move(quant)) {}
  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override;
  const char* name() const override { return "MlxlabDecodeRest"; }

 private:
  Feedforward f_;
  std::vector<int> quant_;  // (group size, bits) of o, gate and up (or gate_up), down
};

std::vector<mx::array> decode_qkv(const mx::array& x, const mx::array& positions,
                                  const std::vector<mx::array>& weights,
                                  const std::vector<int>& quant, const Attention& attention,
                                  mx::Dtype kv_dtype = mx::float32);

mx::array decode_rest(const mx::array& h, const mx::array& q, const mx::array& keys,
                      const mx::array& values, const std::vector<mx::array>& weights,
                      const std::vector<int>& quant, const std::optional<mx::array>& mask,
                      const Feedforward& feedforward);

}  // namespace mlxlab
