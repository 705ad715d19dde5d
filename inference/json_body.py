"""JSON read with bounds: finite numbers only, and a nesting limit.

Python's `json` accepts `NaN`, `Infinity` and `1e999` (a float overflowing to
infinity), none of which is JSON (RFC 8259) and none of which any sampling field can
take; and it recurses per nesting level, so a deep body is a RecursionError. Every
body a client sends (the /v1 surfaces, the REST API through `BoundedJSONParser`, the
lab's websocket, publishing) is read here.
"""

from __future__ import annotations

import json
import math

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from labsettings import lab_settings


class JsonRejected(ValueError):
    """A body that is not bounded JSON; the message says why."""


class JsonMalformed(JsonRejected):
    """Not JSON at all (a syntax error, bad UTF-8), as opposed to JSON past a bound."""


def _constant(name: str):
    raise JsonRejected(f"{name} is not a JSON number: only finite numbers are accepted")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRejected(f"{text} is out of range: only finite numbers are accepted")
    return value


def max_depth() -> int:
    return lab_settings.max_json_depth


def depth_of(value) -> int:
    """How deep arrays and objects nest in `value` (a scalar is 0), without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def loads(raw: bytes | str, *, limit: int | None = None):
    """Parse `raw`; JsonRejected (a ValueError) for anything unbounded or malformed."""
    limit = max_depth() if limit is None else limit
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise JsonRejected(f"JSON nests deeper than the {limit} levels allowed") from None
    except JsonRejected:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonMalformed(str(exc)) from None
    if depth_of(value) > limit:
        raise JsonRejected(f"JSON nests deeper than the {limit} levels allowed")
    return value


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with the same bounds as the /v1 surfaces (a 400 in DRF's shape)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return loads(stream.read() if stream is not None else b"")
        except JsonRejected as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
