"""Whether a model can keep the quantized KV cache a request asks for: checked when the
request is built, so a scheme the model cannot hold is a 400, not a failed batch."""

from __future__ import annotations

from dataclasses import replace

from mlx_lm.models.cache import KVCache, make_prompt_cache

from ...protocol.sampling import KVScheme


class KVSchemeProblem(ValueError):
    """A scheme this model cannot keep; `param`: the request's field to blame."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def model_kv(model, scheme: KVScheme | None) -> KVScheme | None:
    """The request's scheme as this model keeps it, checked: a kv_config of one scheme for
    every layer becomes that uniform scheme (the same cache: one lane, one prompt-cache
    entry), one of no quantized layer a plain cache. Reads the model's shape only.

    Raises KVSchemeProblem: a cache that cannot be quantized, a kv_config of another
    length than the model's layers, a group size that does not divide its heads.
    """
    if scheme is None:
        return None
    per_layer = scheme.layers is not None
    caches = make_prompt_cache(model)
    if not all(type(cache) is KVCache for cache in caches):
        raise KVSchemeProblem(
            "this model's KV cache cannot be quantized", "kv_config" if per_layer else "kv_bits"
        )
    try:
        layers = scheme.per_layer(len(caches))
    except ValueError as error:
        raise KVSchemeProblem(str(error), "kv_config") from None
    head_dim = _head_dim(model)
    for layer in {layer for layer in layers if layer is not None}:
        if head_dim and head_dim % layer.group_size:
            field = f"kv_config's group_size {layer.group_size}" if per_layer else "kv_group_size"
            raise KVSchemeProblem(
                f"{field} must divide this model's head dimension ({head_dim})",
                "kv_config" if per_layer else "kv_group_size",
            )
    return _canonical(scheme, layers)


def _canonical(scheme: KVScheme, layers: tuple) -> KVScheme | None:
    if scheme.layers is None:
        return scheme
    distinct = set(layers)
    if distinct == {None}:
        return None
    if len(distinct) == 1:
        (layer,) = distinct
        return KVScheme(layer.bits, layer.group_size, scheme.start)
    return replace(scheme, layers=tuple(layers))


def _head_dim(model) -> int | None:
    # An mlx-vlm model (media/model.py) keeps its language model's shape in text_config.
    args = getattr(model, "args", None) or getattr(
        getattr(model, "config", None), "text_config", None
    )
    heads = getattr(args, "num_attention_heads", None)
    return getattr(args, "head_dim", None) or (
        args.hidden_size // heads if heads and getattr(args, "hidden_size", None) else None
    )
