"""`lab_settings`: `django.conf.settings.MLXLAB`, read afresh on every access.

So an override (pytest-django's `settings` fixture, `override_settings`) takes effect at
once, with no cache to reload on `setting_changed` as DRF's `api_settings` must. An
override replaces the whole object: `settings.MLXLAB = settings.MLXLAB.replace(max_n=2)`.
"""

from __future__ import annotations

from typing import Any


class LabSettingsProxy:
    """`settings.MLXLAB`, looked up on every attribute access."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        from django.conf import settings

        return getattr(settings.MLXLAB, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("lab settings are read-only: override settings.MLXLAB instead")

    def __repr__(self) -> str:
        from django.conf import settings

        return repr(settings.MLXLAB)
