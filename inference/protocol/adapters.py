"""An adapter a request names, as it crosses from the web side to the worker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdapterRef:
    """An adapter a request asks for: its registry name and its folder."""

    name: str
    path: str
