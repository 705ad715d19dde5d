"""LoRA and DoRA adapters switched on a loaded model without reloading it.

mlx-lm applies an adapter by replacing layers for good (`load_adapters`). A server
that serves several adapters, stacked or not, over one base model instead wraps
each targeted layer once in an `AdapterSlot` that adds the active adapters'
updates to the base layer's output. The engine activates one set per batch
(scheduler.py and loop/adapter_set.py), so every row of a batch sees the same adapters;
an unloaded adapter's updates leave every slot, and a slot left with none its layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ...protocol.adapters import AdapterRef


class AdapterError(ValueError):
    """An adapter folder that cannot be applied to this model."""


def adapter_key(adapters: tuple[AdapterRef, ...]) -> tuple[str, ...]:
    return tuple(ref.name for ref in adapters)


class AdapterSlot(nn.Module):
    """A base layer plus the updates of whichever adapters are active."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base = base
        # Plain attributes, not parameters: the model's parameter tree stays the base's.
        object.__setattr__(self, "updates", {})  # adapter name -> callable(x) -> delta
        object.__setattr__(self, "active", ())

    def __call__(self, x: mx.array) -> mx.array:
        y = self.base(x)
        for name in self.active:
            update = self.updates.get(name)
            if update is not None:
                y = y + update(x).astype(y.dtype)
        return y


def _low_rank(a: mx.array, b: mx.array, scale: float):
    a, b = a.astype(mx.float32), (scale * b).astype(mx.float32)
    return lambda x: (x.astype(mx.float32) @ a) @ b


def _base_weight(layer: nn.Module) -> mx.array:
    """The layer's weight as float32 (out, in), whatever form the fast path left it in."""
    if "scales" in layer:  # nn.QuantizedLinear, or its twin on the quantized kernel
        return mx.dequantize(
            layer.weight, layer.scales, layer.get("biases"), layer.group_size, layer.bits,
            mode=getattr(layer, "mode", "affine"),
        ).astype(mx.float32)  # fmt: skip
    return layer.weight.astype(mx.float32)


def _dora(layer: nn.Module, a, b, magnitude, scale: float):
    """DoRA rescales whole rows, so it is folded into one dense weight difference."""
    weight = _base_weight(layer)
    adapted = weight + scale * (b.T @ a.T).astype(mx.float32)
    norm = mx.linalg.norm(adapted, axis=1, keepdims=True)
    delta_t = ((magnitude.astype(mx.float32)[:, None] / norm) * adapted - weight).T
    mx.eval(delta_t)
    return lambda x: x.astype(mx.float32) @ delta_t


def _read(folder: Path) -> tuple[dict, dict[str, mx.array]]:
    try:
        config = json.loads((folder / "adapter_config.json").read_text())
        weights = mx.load(str(folder / "adapters.safetensors"))
    except (OSError, ValueError, RuntimeError) as error:
        raise AdapterError(f"cannot read the adapter in {folder}: {error}") from None
    kind = config.get("fine_tune_type", "lora")
    if kind not in ("lora", "dora"):
        raise AdapterError(f"{kind!r} adapters cannot be applied at inference; fuse them instead")
    return config, weights


def _modules(model: nn.Module) -> dict[str, nn.Module]:
    return dict(model.named_modules())


def load_adapter(model: nn.Module, ref: AdapterRef) -> None:
    """Wrap the layers the adapter targets (once) and register its updates on them."""
    config, weights = _read(Path(ref.path))
    scale = float(config.get("lora_parameters", {}).get("scale", 20.0))
    dora = config.get("fine_tune_type") == "dora"
    modules = _modules(model)
    layers = sorted({key.rsplit(".", 1)[0] for key in weights})
    for path in layers:
        slot = _slot(model, modules, path)
        a, b = weights.get(f"{path}.lora_a"), weights.get(f"{path}.lora_b")
        if a is None or b is None:
            raise AdapterError(f"{ref.name}: {path} has no lora_a/lora_b pair")
        if dora:
            slot.updates[ref.name] = _dora(slot.base, a, b, weights[f"{path}.m"], scale)
        else:
            slot.updates[ref.name] = _low_rank(a, b, scale)


def _slot(model: nn.Module, modules: dict, path: str) -> AdapterSlot:
    layer = modules.get(path)
    if isinstance(layer, AdapterSlot):
        return layer
    parent_path, _, name = path.rpartition(".")
    parent = modules.get(parent_path)
    if layer is None or parent is None or not hasattr(layer, "weight"):
        raise AdapterError(f"the adapter targets {path}, which this model does not have")
    slot = AdapterSlot(layer)
    setattr(parent, name, slot)
    modules[path] = slot
    return slot


def unload_adapter(model: nn.Module, name: str) -> None:
    """Drop an adapter's updates from every layer (its arrays go with them). A layer no
    loaded adapter updates any more is its base layer again, and so takes the fast paths
    that a slot keeps it from (fused_decode.py, compiled_mlp.py) again."""
    modules = _modules(model)
    for path, module in modules.items():
        if isinstance(module, AdapterSlot):
            module.updates.pop(name, None)
            if not module.updates:
                parent_path, _, attribute = path.rpartition(".")
                setattr(modules[parent_path], attribute, module.base)


def activate(model: nn.Module, names: tuple[str, ...]) -> None:
    """Make exactly these adapters (already loaded) apply from the next forward pass."""
    for module in _modules(model).values():
        if isinstance(module, AdapterSlot):
            object.__setattr__(module, "active", names)
