"""The `adapter` field of a generation request, resolved against the registry."""

from __future__ import annotations

import logging

from labsettings import lab_settings

from .errors import ApiError
from .models import Adapter
from .protocol.adapters import AdapterRef

log = logging.getLogger(__name__)

USAGE = "adapter must be an adapter name, names joined with '+' to stack them, or 'none'"


async def resolve_adapters(value, model: str) -> tuple[AdapterRef, ...]:
    """The adapters a request asks for, each checked to belong to its model; none asked
    for: the server's MLXLAB_DEFAULT_ADAPTER where it was trained on this model."""
    if value is None:
        return await _server_default(model)
    if value == "none":  # opts out of the server's default too
        return ()
    return await _named(value, model)


async def _server_default(model: str) -> tuple[AdapterRef, ...]:
    value = lab_settings.default_adapter
    if not value:
        return ()
    try:
        return await _named(value, model)
    except ApiError as error:  # trained on another model, or gone: it does not apply here
        log.info("the default adapter does not apply to %s: %s", model, error.message)
        return ()


async def _named(value, model: str) -> tuple[AdapterRef, ...]:
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
