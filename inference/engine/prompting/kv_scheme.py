"""Whether a model can keep the quantized KV cache a request asks for: checked when the
request is built, so a scheme the model cannot hold is a 400, not a failed batch."""

from __future__ import annotations

from mlx_lm.models.cache import KVCache, make_prompt_cache


def kv_scheme_problem(model, group_size: int) -> tuple[str, str] | None:
    """Why this model cannot keep a quantized KV cache in groups of `group_size`, and the
    field to blame; None if it can. Reads the model's shape only: no MLX work."""
    if not all(type(cache) is KVCache for cache in make_prompt_cache(model)):
        return "this model's KV cache cannot be quantized", "kv_bits"
    args = getattr(model, "args", None)
    heads = getattr(args, "num_attention_heads", None)
    head_dim = getattr(args, "head_dim", None) or (
        args.hidden_size // heads if heads and getattr(args, "hidden_size", None) else None
    )
    if head_dim and head_dim % group_size:
        message = f"kv_group_size must divide this model's head dimension ({head_dim})"
        return message, "kv_group_size"
    return None
