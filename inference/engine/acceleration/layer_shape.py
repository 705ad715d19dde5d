"""What a decoder block computes, read from its public structure and the model's config:
the description the native fused layers (fused_decode.py) run a block from.

A block is described by the names of its parts and by probing them, never by its class:
which norms it has and where (Llama's input and post-attention norms; Gemma 3's four;
OLMo 2's two after attention and the MLP), what each norm multiplies by (its weight, or
Gemma's 1 + weight: one call on a random row tells), the attention's projections (q, k, v
with or without biases, or Phi-3's one fused projection), its q and k norms (each head,
Qwen3 and Gemma 3; all heads at once, OLMo 2), its RoPE (rope_tables.py), the MLP's
projections (gate/up/down or Phi-3's fused gate_up) and its activation (one call on a
random row tells SiLU from GELU), and Granite's residual multiplier. An MLP outside that
(a mixture of experts: Qwen3-MoE's, Mixtral's, Granite MoE's) stays the block's own module,
called between the native attention half and the residual. What a structure
cannot say (the order of the residuals) is checked once at load against the block's own
code (fused_decode._agrees). A block outside this description gets `Unfit`, whose reason
/stats shows.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn

from .quantized_kernel import KernelLinear
from .rope_tables import Rope, rope_of

# Where a block's norms sit, by the set of their names: (input, post-attention, pre-MLP,
# post-MLP), each the block's name for it or None.
NORM_LAYOUTS = {
    frozenset({"input_layernorm", "post_attention_layernorm"}): (
        "input_layernorm",
        None,
        "post_attention_layernorm",
        None,
    ),
    frozenset(
        {
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        }
    ): (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
    frozenset({"post_attention_layernorm", "post_feedforward_layernorm"}): (
        None,
        "post_attention_layernorm",
        None,
        "post_feedforward_layernorm",
    ),
}
SEPARATE_QKV = ("q_proj", "k_proj", "v_proj")
FUSED_QKV = ("qkv_proj",)
SEPARATE_MLP = ("gate_proj", "up_proj", "down_proj")
FUSED_MLP = ("gate_up_proj", "down_proj")
OWN_MLP = ()  # the native layers compute the attention half; the block's MLP module the rest
# The MLP's name in a block: Llama's and most families', or Mixtral's and Granite MoE's
# mixture of experts.
MLP_PARTS = ("mlp", "block_sparse_moe")
HEAD_NORMS = {"q_norm", "k_norm"}
FLOATS = (mx.float32, mx.float16, mx.bfloat16)
HEAD_COUNTS = ("n_heads", "num_heads", "num_attention_heads")
KV_HEAD_COUNTS = ("n_kv_heads", "num_kv_heads", "num_key_value_heads")
# The activations the native layers compute, by the number they take.
ACTIVATIONS = {"silu": (0, nn.silu), "gelu_approx": (1, nn.gelu_approx), "gelu": (2, nn.gelu)}


@dataclass(frozen=True)
class Unfit:
    """Why a block is not one the native layers compute."""

    reason: str


@dataclass(frozen=True)
class Shape:
    """A block the native layers compute, as they must know it."""

    heads: int
    kv_heads: int
    head_dim: int
    scale: float  # attention's
    rope: Rope
    norms: tuple[str | None, str | None, str | None, str | None] = (
        "input_layernorm",
        None,
        "post_attention_layernorm",
        None,
    )
    norm_offset: float = 0.0  # 1: Gemma's norms scale by 1 + weight
    qkv: tuple[str, ...] = SEPARATE_QKV
    qkv_bias: bool = False
    qk_norm_eps: float = 0.0  # 0: no q and k norms
    qk_norm_full: bool = False  # across all heads (OLMo 2), not each head
    mlp: tuple[str, ...] = SEPARATE_MLP
    activation: str = "silu"
    residual_scale: float = 1.0
    mlp_part: str = "mlp"  # the block's name for its MLP
    extras: tuple[str, ...] = field(default=(), compare=False)  # what it adds, for /stats

    @cached_property  # read on every layer of every step
    def projections(self) -> tuple[tuple[str, str], ...]:
        """(part, name) of every projection, in the order the native calls take them."""
        attention = tuple(("self_attn", n) for n in (*self.qkv, "o_proj"))
        return attention + tuple((self.mlp_part, n) for n in self.mlp)


def describe(
    block: nn.Module, config=None, kinds: tuple[type, ...] = (KernelLinear,)
) -> Shape | Unfit:
    """The block's Shape, or why the native layers do not compute it. `config`: the model's
    arguments (its `args`), which a scaled RoPE is computed from. Its projections must be
    of `kinds`: the CPU's quantized matmul kernel's (the default), or on a GPU MLX's
    Linear and QuantizedLinear."""
    if not isinstance(block, nn.Module):
        return Unfit("the model's layers are not modules")
    called = _arguments(block)
    if called != ("x", "mask", "cache"):
        return Unfit(f"a block called with other arguments ({', '.join(called)})")
    children = set(block.children())
    mlp_part = next((name for name in MLP_PARTS if name in children), None)
    if "self_attn" not in children or mlp_part is None:
        return Unfit("a block without self_attn and mlp parts")
    layout = NORM_LAYOUTS.get(frozenset(children - {"self_attn", mlp_part}))
    if layout is None:
        extra = sorted(children - {"self_attn", mlp_part})
        return Unfit(f"a block whose other parts ({', '.join(extra)}) are no known norm layout")
    offsets = {norm_offset(block[name]) for name in layout if name}
    if len(offsets) != 1 or None in offsets:
        return Unfit("a block's norms are not all RMSNorms of one kind")
    attention = _attention(block["self_attn"], kinds)
    if isinstance(attention, Unfit):
        return attention
    qkv, (heads, kv_heads), head_dim, qkv_bias = attention
    norms = _head_norms(block["self_attn"], (heads, kv_heads), head_dim, offsets)
    if isinstance(norms, Unfit):
        return norms
    rope = rope_of(block["self_attn"]["rope"], head_dim, config)
    if isinstance(rope, str):
        return Unfit(rope)
    width = block[next(name for name in layout if name)]["weight"].shape[0]
    mlp = _mlp(block[mlp_part], width, kinds)
    if isinstance(mlp, Unfit) and not _called_with_x(block[mlp_part]):
        return mlp
    # An MLP the native layers do not compute (a mixture of experts) stays the block's own.
    names, activation = (OWN_MLP, "silu") if isinstance(mlp, Unfit) else mlp
    residual = getattr(block, "residual_multiplier", 1.0)
    if not isinstance(residual, (int, float)):
        return Unfit("a residual multiplier that is not a number")
    shape = Shape(
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        scale=float(block["self_attn"].scale),
        rope=rope,
        norms=layout,
        norm_offset=offsets.pop(),
        qkv=qkv,
        qkv_bias=qkv_bias,
        qk_norm_eps=norms[0],
        qk_norm_full=norms[1],
        mlp=names,
        activation=activation,
        residual_scale=float(residual),
        mlp_part=mlp_part,
    )
    return replace(shape, extras=_extras(shape, type(block[mlp_part]).__name__))


def _arguments(block: nn.Module) -> tuple[str, ...]:
    """The names a block's call takes, after self (the fused call takes x, mask, cache)."""
    try:
        parameters = inspect.signature(type(block).__call__).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(parameters)[1:]


def _called_with_x(module: nn.Module) -> bool:
    """Whether the module's call takes the hidden rows alone (what the fused block passes
    an MLP it leaves to the block's own code)."""
    return _arguments(module) == ("x",)


def _counts(attention: nn.Module) -> tuple[int, int] | None:
    """(query heads, key/value heads), by the names mlx-lm's modules give them."""
    heads = [getattr(attention, n, None) for n in HEAD_COUNTS]
    kv_heads = [getattr(attention, n, None) for n in KV_HEAD_COUNTS]
    heads = next((n for n in heads if isinstance(n, int)), None)
    kv_heads = next((n for n in kv_heads if isinstance(n, int)), None)
    return (heads, kv_heads) if heads and kv_heads and heads % kv_heads == 0 else None


def _attention(attention: nn.Module, kinds: tuple[type, ...]):
    """(projection names, (heads, kv heads), head size, q/k/v biases) or Unfit."""
    parts = set(attention.children()) - HEAD_NORMS
    counts = _counts(attention)
    if counts is None:
        return Unfit("an attention whose head counts are not public integers")
    if not isinstance(getattr(attention, "scale", None), float):
        return Unfit("an attention without a float scale")
    heads, kv_heads = counts
    if parts == {*SEPARATE_QKV, "o_proj", "rope"}:
        names, rows = SEPARATE_QKV, heads
    elif parts == {*FUSED_QKV, "o_proj", "rope"}:
        names, rows = FUSED_QKV, heads + 2 * kv_heads
    else:
        return Unfit(f"an attention of other parts ({', '.join(sorted(parts))})")
    projections = [attention[n] for n in (*names, "o_proj")]
    if not all(type(m) in kinds for m in projections):
        return Unfit(f"an attention projection of another kind than {_names(kinds)}")
    head_dim = attention[names[0]]["weight"].shape[0] // rows  # the weight's rows: outputs
    biased = ["bias" in m for m in projections]
    if biased[-1] or len(set(biased[:-1])) != 1 or (biased[0] and names == FUSED_QKV):
        return Unfit("an attention whose biases are not on q, k and v alone")
    return names, counts, head_dim, biased[0]


def _head_norms(attention: nn.Module, counts: tuple[int, int], head_dim: int, offsets: set):
    """(epsilon, across all heads) of the q and k norms, (0, False) without, or Unfit."""
    parts = set(attention.children())
    if not parts & HEAD_NORMS:
        return 0.0, False
    if not parts >= HEAD_NORMS:
        return Unfit("a norm on q or k alone")
    q, k = attention["q_norm"], attention["k_norm"]
    if {norm_offset(q), norm_offset(k)} != offsets or q.eps != k.eps:
        return Unfit("q and k norms of another kind than the block's")
    widths = (q.weight.shape[0], k.weight.shape[0])
    if widths == (head_dim, head_dim):
        return float(q.eps), False
    if widths == (counts[0] * head_dim, counts[1] * head_dim):
        return float(q.eps), True
    return Unfit("q and k norms neither per head nor across all heads")


def _mlp(mlp: nn.Module, width: int, kinds: tuple[type, ...]):
    """(projection names, activation) or Unfit."""
    parts = set(mlp.children())
    if parts not in (set(SEPARATE_MLP), set(FUSED_MLP)):
        return Unfit(f"an MLP of other parts ({', '.join(sorted(parts))})")
    names = SEPARATE_MLP if parts == set(SEPARATE_MLP) else FUSED_MLP
    projections = [mlp[n] for n in names]
    if not all(type(m) in kinds for m in projections):
        return Unfit(f"an MLP projection of another kind than {_names(kinds)}")
    if any("bias" in m for m in projections):
        return Unfit("an MLP with biases")
    activation = _activation(mlp, names, width)
    if activation is None:
        return Unfit("an MLP whose activation is not SiLU or GELU")
    return names, activation


def norm_offset(norm: nn.Module) -> float | None:
    """0 for an RMSNorm scaling by its weight, 1 for one scaling by 1 + weight (Gemma's),
    None for anything else: what one call on a random row gives."""
    if not isinstance(norm, nn.Module) or set(norm.parameters()) != {"weight"} or norm.children():
        return None
    weight, eps = norm["weight"], getattr(norm, "eps", None)
    if not isinstance(eps, float) or weight.ndim != 1 or weight.dtype not in FLOATS:
        return None
    x = mx.random.normal((2, weight.shape[0]), key=mx.random.key(1))
    got = norm(x)
    for offset in (0.0, 1.0):  # 1 + weight in the weight's type, as Gemma's code has it
        want = mx.fast.rms_norm(x, 1.0 + weight if offset else weight, eps)
        if _close(got, want, 1e-5):
            return offset
    return None


def _activation(mlp: nn.Module, names: tuple[str, ...], width: int) -> str | None:
    """Which of ACTIVATIONS the MLP computes: its output for a random row against each."""
    x = 3 * mx.random.normal((2, width), key=mx.random.key(2))
    if names == FUSED_MLP:
        gate, up = mx.split(mlp["gate_up_proj"](x), 2, axis=-1)
    else:
        gate, up = mlp["gate_proj"](x), mlp["up_proj"](x)
    got = mlp(x)
    errors = {
        name: _error(got, mlp["down_proj"](function(gate) * up))
        for name, (_, function) in ACTIVATIONS.items()
    }
    best = min(errors, key=errors.get)
    return best if errors[best] <= 1e-5 else None


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(kind.__name__ for kind in kinds)


def _error(got: mx.array, want: mx.array) -> float:
    return mx.abs(got - want).max().item() / (1.0 + mx.abs(want).max().item())


def _close(got: mx.array, want: mx.array, tolerance: float) -> bool:
    return _error(got, want) <= tolerance


def _extras(shape: Shape, mlp_class: str) -> tuple[str, ...]:
    """What the block adds to Llama's, in words (for /stats and the tests)."""
    extras = []
    if shape.norms[1] or shape.norms[3]:
        extras.append("norms after attention and MLP")
    if shape.norm_offset:
        extras.append("norms of 1 + weight")
    if shape.qkv == FUSED_QKV:
        extras.append("fused q/k/v")
    if shape.qkv_bias:
        extras.append("q/k/v biases")
    if shape.qk_norm_eps:
        extras.append("q/k norms across heads" if shape.qk_norm_full else "q/k head norms")
    extras.extend(shape.rope.extras())
    if shape.mlp == FUSED_MLP:
        extras.append("fused gate/up")
    if shape.mlp == OWN_MLP:
        extras.append(f"its own MLP ({mlp_class})")
    if shape.activation != "silu":
        extras.append(shape.activation)
    if shape.residual_scale != 1.0:
        extras.append("residual multiplier")
    return tuple(extras)
