"""On an NVIDIA GPU, fewer kernels in a one-token decode step of a fused Llama layer.

MLX's CUDA backend spends about 7 us of host time on every kernel of a step (it records
each into a new CUDA graph), and on an H200 that host work, not the device, bounds a
decode step of a 1B model ("Where a decode step's time goes" in docs/BENCHMARKS.md's
history: git show 02df74b:docs/BENCHMARKS.md). With MLXLAB_DECODE_KERNELS set, the layers
of fused_projections.py run one or both of these custom kernels (`mx.fast.cuda_kernel`) on
their one-token steps:

- `qkv_rope`: from the fused q/k/v matmul's output and the cache's offset (an int, or one
  per row as mlx-lm's BatchKVCache keeps them), the RoPE'd queries and keys and the values
  in the (B, heads, 1, head_dim) layout attention takes: it replaces two RoPE kernels and
  the copies of the split;
- `add_norm` (`all` only): the residual add after attention and the RMSNorm before the
  MLP, both outputs from one kernel; and each layer's last residual add with the next
  layer's input norm.

Each computes what mlx-lm's operations compute, in their order and at their precision
(RoPE's angle as MLX's kernel forms it, products rounded to the dtype where MLX rounds
them); the one difference is the order in which the norm's sum of squares is added up.
The attention output also skips its transpose: with one query, (B, heads, 1, dim) and
(B, 1, heads, dim) hold their elements in the same order.

The `reference` kind computes the same with MLX's own operations, on any device: the
tests run the decode path on the CPU with it.

Off by default ("Custom CUDA kernels for the decode step" in docs/BENCHMARKS.md's history:
git show 02df74b:docs/BENCHMARKS.md): on the H200, the RoPE kernel took 16-32 kernels off a
step (6.5-12%) and lowered its host and device time, but the engine's tok/s alternated in
one process moved between 0.86x and 1.10x; a custom kernel's call costs the host 4.5-11 us
against about 1 for one of MLX's own operations, so `add_norm`, which replaces two cheap
ones, saves nothing.
"""

from __future__ import annotations

import struct

import mlx.core as mx
import mlx.nn as nn

from labsettings import engine_settings

# On a CUDA GPU: on or qkv (the RoPE kernel), all (both kernels), off (none: the default, as
# measured in docs/BENCHMARKS.md); reference: MLX's operations in their place, on any
# device (the tests).
VARIABLE = "MLXLAB_DECODE_KERNELS"
DTYPES = (mx.bfloat16, mx.float16, mx.float32)
THREADS = 256


def _bits(value: float) -> int:
    """The float32 nearest `value`, as the integer of its bits (exact in a CUDA literal)."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _log2_f32(base: float) -> float:
    """std::log2 of the float32 base, as MLX's RoPE passes it to its kernel."""
    import math

    return _f32(math.log2(_f32(base)))


class Plan:
    """What one layer's kernels need: its head counts, RoPE and norm settings."""

    __slots__ = ("heads", "kv_heads", "dim", "traditional", "base", "scale", "eps")

    def __init__(self, block) -> None:
        attention = block["self_attn"]
        rope = attention.rope
        self.heads, self.kv_heads, self.dim = attention.n_heads, attention.n_kv_heads, rope.dims
        self.traditional, self.base, self.scale = bool(rope.traditional), rope.base, rope.scale
        self.eps = block["post_attention_layernorm"].eps


def plan(block) -> Plan | None:
    """The block's plan, or None where these kernels do not compute what mlx-lm's would:
    a RoPE other than nn.RoPE over the whole head (Llama 3 scaling, say), or norms other
    than nn.RMSNorm."""
    attention = block["self_attn"]
    rope = getattr(attention, "rope", None)
    if type(rope) is not nn.RoPE or rope.base is None:
        return None
    dim = getattr(attention, "head_dim", None)
    if rope.dims != dim or dim % 2:
        return None
    norms = (block["input_layernorm"], block["post_attention_layernorm"])
    if any(type(norm) is not nn.RMSNorm for norm in norms):
        return None
    return Plan(block)


def offsets(offset, batch: int) -> mx.array | None:
    """The cache's offset as the int32 array the kernel reads (one, or one per row), or
    None where it is neither an int nor such an array."""
    if isinstance(offset, int):
        return _scalar(offset)
    if isinstance(offset, mx.array) and offset.ndim <= 1 and offset.size in (1, batch):
        if not mx.issubdtype(offset.dtype, mx.integer):
            return None
        return offset if offset.dtype == mx.int32 else offset.astype(mx.int32)
    return None


_last_scalar: list = [None, None]


def _scalar(value: int) -> mx.array:
    """One array per step, not one per layer: the layers of a step share the offset."""
    if _last_scalar[0] != value:
        _last_scalar[:] = [value, mx.array([value], dtype=mx.int32)]
    return _last_scalar[1]


# -- MLX's own operations (any device) ------------------------------------------------------


class Reference:
    """The kernels' results computed with MLX's operations: what they must equal."""

    name = "reference"

    @staticmethod
    def qkv_rope(projected: mx.array, offset: mx.array, p: Plan):
        batch = projected.shape[0]
        heads, kv_heads, dim = p.heads, p.kv_heads, p.dim
        q, k, v = mx.split(projected, [heads * dim, (heads + kv_heads) * dim], axis=-1)
        q = q.reshape(batch, 1, heads, dim).transpose(0, 2, 1, 3)
        k = k.reshape(batch, 1, kv_heads, dim).transpose(0, 2, 1, 3)
        v = v.reshape(batch, 1, kv_heads, dim).transpose(0, 2, 1, 3)
        offset = offset.reshape(-1) if offset.size == batch else offset.reshape(())
        rope = dict(traditional=p.traditional, base=p.base, scale=p.scale, offset=offset)
        return mx.fast.rope(q, dim, **rope), mx.fast.rope(k, dim, **rope), v

    @staticmethod
    def add_norm(x: mx.array, y: mx.array, weight: mx.array, eps: float):
        h = x + y
        return h, mx.fast.rms_norm(h, weight, eps)


# -- the CUDA kernels ----------------------------------------------------------------------

_QKV_ROPE = """
    constexpr int HALF = D / 2;
    constexpr int ALL = H + 2 * KV;
    const int batch = qkv_shape[0];
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)batch * ALL * HALF) {
        return;
    }
    const int i = idx % HALF;
    const int head = (idx / HALF) % ALL;
    const int b = idx / (HALF * ALL);
    const T* row = qkv + ((long)b * ALL + head) * D;
    const int i1 = TRADITIONAL ? 2 * i : i;
    const int i2 = TRADITIONAL ? 2 * i + 1 : i + HALF;
    if (head >= H + KV) {
        T* out = values + ((long)b * KV + (head - H - KV)) * D;
        out[i1] = row[i1];
        out[i2] = row[i2];
        return;
    }
    const float log2_base = __int_as_float(LOG2_BASE_BITS);
    const float scale = __int_as_float(SCALE_BITS);
    const int position = offset[PER_ROW ? b : 0];
    const float d = static_cast<float>(i) / static_cast<float>(HALF);
    const float inv_freq = exp2(-d * log2_base);
    const float L = scale * static_cast<float>(position);
    const float theta = L * inv_freq;
    const float costheta = cos(theta);
    const float sintheta = sin(theta);
    const float x1 = static_cast<float>(row[i1]);
    const float x2 = static_cast<float>(row[i2]);
    T* out = head < H ? queries + ((long)b * H + head) * D
                      : keys + ((long)b * KV + (head - H)) * D;
    out[i1] = static_cast<T>(x1 * costheta - x2 * sintheta);
    out[i2] = static_cast<T>(x1 * sintheta + x2 * costheta);
"""

_ADD_NORM = """
    constexpr int PER = (DIM + THREADS - 1) / THREADS;
    const int tid = threadIdx.x;
    const long base = (long)blockIdx.x * DIM;
    float kept[PER];
    float total = 0.0f;
#pragma unroll
    for (int n = 0; n < PER; ++n) {
        const int j = tid + n * THREADS;
        kept[n] = 0.0f;
        if (j < DIM) {
            const T sum = static_cast<T>(
                static_cast<float>(x[base + j]) + static_cast<float>(y[base + j]));
            h[base + j] = sum;
            kept[n] = static_cast<float>(sum);
            total += kept[n] * kept[n];
        }
    }
    __shared__ float partial[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        total += __shfl_xor_sync(0xffffffff, total, o);
    }
    if ((tid & 31) == 0) {
        partial[tid >> 5] = total;
    }
    __syncthreads();
    if (tid < 32) {
        float s = tid < THREADS / 32 ? partial[tid] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffff, s, o);
        }
        if (tid == 0) {
            partial[0] = s;
        }
    }
    __syncthreads();
    const float eps = __int_as_float(EPS_BITS);
    const float normalizer = rsqrt(partial[0] / static_cast<float>(DIM) + eps);
#pragma unroll
    for (int n = 0; n < PER; ++n) {
        const int j = tid + n * THREADS;
        if (j < DIM) {
            const T scaled = static_cast<T>(kept[n] * normalizer);
            normed[j + base] = static_cast<T>(
                static_cast<float>(weight[j]) * static_cast<float>(scaled));
        }
    }
"""


class Cuda:
    """Both kernels, JIT-compiled by MLX (NVRTC) per dtype, shape and setting.

    Building a call to a custom kernel costs the host more than one of MLX's own
    operations (4.5-11 us against about 1, `bench/gpu_kernel_cost.py`), so what does not
    change between calls (the kernel, its template arguments) is made once per setting.
    """

    name = "cuda"
    _prepared: dict = {}

    @classmethod
    def qkv_rope(cls, projected: mx.array, offset: mx.array, p: Plan):
        dtype = projected.dtype
        key = ("qkv_rope", p.heads, p.kv_heads, p.dim, p.traditional, p.base, p.scale, dtype)
        prepared = cls._prepared.get(key)
        if prepared is None:
            prepared = cls._prepared[key] = _prepare_qkv_rope(p, dtype)
        kernel, templates = prepared
        batch, heads, kv_heads, dim = projected.shape[0], p.heads, p.kv_heads, p.dim
        kv_shape = (batch, kv_heads, 1, dim)
        return kernel(
            inputs=[projected, offset],
            template=templates[offset.size != 1],
            grid=(batch * (heads + 2 * kv_heads) * (dim // 2), 1, 1),
            threadgroup=(THREADS, 1, 1),
            output_shapes=[(batch, heads, 1, dim), kv_shape, kv_shape],
            output_dtypes=[dtype, dtype, dtype],
        )

    @classmethod
    def add_norm(cls, x: mx.array, y: mx.array, weight: mx.array, eps: float):
        dtype, dim = x.dtype, x.shape[-1]
        key = ("add_norm", eps, dim, dtype)
        prepared = cls._prepared.get(key)
        if prepared is None:
            prepared = cls._prepared[key] = _prepare_add_norm(eps, dim, dtype)
        kernel, template = prepared
        return kernel(
            inputs=[x, y, weight],
            template=template,
            grid=(x.size // dim * THREADS, 1, 1),
            threadgroup=(THREADS, 1, 1),
            output_shapes=[x.shape, x.shape],
            output_dtypes=[dtype, dtype],
        )


class CudaQkv(Cuda):
    """The RoPE kernel alone: the add and the norm stay MLX's (its two operations cost the
    host less than one custom kernel's call)."""

    name = "cuda (q/k/v and RoPE only)"
    add_norm = Reference.add_norm


def _prepare_qkv_rope(p: Plan, dtype) -> tuple:
    log2_base, scale = _bits(_log2_f32(p.base)), _bits(p.scale)
    source = _QKV_ROPE.replace("LOG2_BASE_BITS", f"0x{log2_base:08x}")
    kernel = mx.fast.cuda_kernel(
        name=f"mlxlab_qkv_rope_{log2_base:08x}_{scale:08x}",
        input_names=["qkv", "offset"],
        output_names=["queries", "keys", "values"],
        source=source.replace("SCALE_BITS", f"0x{scale:08x}"),
    )
    common = [("T", dtype), ("H", p.heads), ("KV", p.kv_heads), ("D", p.dim)]
    common.append(("TRADITIONAL", p.traditional))
    return kernel, (common + [("PER_ROW", False)], common + [("PER_ROW", True)])


def _prepare_add_norm(eps: float, dim: int, dtype) -> tuple:
    bits = _bits(eps)
    kernel = mx.fast.cuda_kernel(
        name=f"mlxlab_add_norm_{bits:08x}",
        input_names=["x", "y", "weight"],
        output_names=["h", "normed"],
        source=_ADD_NORM.replace("EPS_BITS", f"0x{bits:08x}"),
    )
    return kernel, [("T", dtype), ("DIM", dim), ("THREADS", THREADS)]


def chosen() -> type | None:
    """The kernels loaded models use (MLXLAB_DECODE_KERNELS), or None."""
    value = engine_settings.decode_kernels
    if value == "reference":
        return Reference
    kinds = {"qkv": CudaQkv, "all": Cuda, "on": DEFAULT_KIND}
    if value not in kinds:
        return None
    cuda = getattr(mx, "cuda", None)
    if cuda is None or not cuda.is_available() or not hasattr(mx.fast, "cuda_kernel"):
        return None
    return kinds[value]


DEFAULT_KIND = CudaQkv
