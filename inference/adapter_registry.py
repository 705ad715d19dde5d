"""The `adapter` field of a generation request, resolved against the registry."""

from __future__ import annotations

from .api.errors import ApiError
from .engine.adapters import AdapterRef
from .models import Adapter

USAGE = "adapter must be an adapter name, names joined with '+' to stack them, or 'none'"


async def resolve_adapters(value, model: str) -> tuple[AdapterRef, ...]:
    """The adapters a request asks for, each checked to belong to its model."""
    if value is None or value == "none":
        return ()
    names = value.split("+") if isinstance(value, str) else []
    names = [name.strip() for name in names]
    if not names or not all(names) or len(set(names)) != len(names):
        raise ApiError(USAGE, param="adapter")
    refs = []
    for name in names:
        record = await Adapter.objects.filter(name=name).afirst()
        if record is None:
            raise ApiError(
                f"The adapter '{name}' does not exist",
                status=404,
                code="adapter_not_found",
                param="adapter",
            )
        if record.base_model != model:
            raise ApiError(
                f"The adapter '{name}' was trained on {record.base_model}, not {model}",
                param="adapter",
            )
        refs.append(AdapterRef(name=name, path=record.path))
    return tuple(refs)
