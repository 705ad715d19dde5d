"""Parsers of the settings table: the text of one environment variable into a value.

A ValueError says what is wrong with the text; the table names the variable.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRUE = frozenset({"1", "true", "yes", "on"})
# An empty value is off, as it always was: `MLXLAB_PRELOAD=` does not preload.
FALSE = frozenset({"", "0", "false", "no", "off"})


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("not an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("not a number") from None


def parse_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise ValueError("not a boolean (1, true, yes, on / 0, false, no, off)")


def optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse`, with a blank value meaning unset (None) rather than an error."""

    def parse_optional(text: str) -> Any:
        return parse(text) if text.strip() else None

    return parse_optional


def one_of(*choices: str) -> Callable[[str], str]:
    def parse_choice(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    parse_choice.choices = choices  # type: ignore[attr-defined]  # docs/SETTINGS.md shows them
    return parse_choice


def switch(*modes: str) -> Callable[[str], str]:
    """A boolean ("on" or "off", however it is spelled) or one of `modes`: the engine's
    switches that also take a kind (`reference`, `force`, `all`)."""

    def parse_switch(text: str) -> str:
        word = text.strip().lower()
        if word in modes:
            return word
        try:
            return "on" if parse_bool(word) else "off"
        except ValueError:
            raise ValueError(f"must be on, off or one of {', '.join(modes)}") from None

    parse_switch.choices = ("on", "off", *modes)  # type: ignore[attr-defined]
    return parse_switch


def parse_list(text: str) -> tuple[str, ...]:
    """Comma-separated; blanks dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


# What "on" opens: every address, IPv4 and IPv6.
EVERY_NETWORK = ("0.0.0.0/0", "::/0")


def parse_networks(text: str) -> tuple[str, ...]:
    """A boolean (off: none, on: every address) or comma-separated addresses and networks,
    `10.1.2.0/24,fd00::/8`, each written as its network."""
    try:
        return EVERY_NETWORK if parse_bool(text) else ()
    except ValueError:
        pass
    networks = []
    for item in parse_list(text):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or network (10.0.0.0/8)") from None
    return tuple(networks)


def parse_paths(text: str) -> tuple[Path, ...]:
    """Colon-separated folders, as PATH is; blanks dropped. Relative ones are refused: a
    root that moved with the working directory would confine nothing."""
    paths = tuple(Path(item.strip()) for item in text.split(os.pathsep) if item.strip())
    relative = [str(path) for path in paths if not path.is_absolute()]
    if relative:
        raise ValueError(f"not an absolute path: {relative[0]}")
    return paths


def parse_key_digests(text: str) -> tuple[str, ...]:
    """API keys, hashed at once: the raw keys never sit in settings or logs."""
    return tuple(hashlib.sha256(key.encode()).hexdigest() for key in parse_list(text))


def parse_path_limits(text: str) -> dict[str, int]:
    """`/v1/messages=1048576,/api/=65536` -> {path prefix: bytes}."""
    limits = {}
    for item in parse_list(text):
        prefix, equals, limit = item.rpartition("=")
        if not equals or not prefix:
            raise ValueError(f"{item!r} is not PREFIX=BYTES")
        limits[prefix] = parse_int(limit)
    return limits


def parse_kv_bits(text: str) -> int | None:
    """4 or 8 (a quantized KV cache), or 16 (none: blank means the same)."""
    bits = parse_int(text)
    if bits not in (4, 8, 16):
        raise ValueError(f"must be 4, 8 or 16 (got {text!r})")
    return None if bits == 16 else bits


def parse_kv_group_size(text: str) -> int:
    size = parse_int(text)
    if size not in (32, 64, 128):
        raise ValueError(f"must be 32, 64 or 128 (got {text!r})")
    return size


def parse_kv_by_model(text: str) -> dict[str, dict[str, int | None]]:
    """`big-model=4/64/0,other=8,small=16` -> {model: {bits, group_size?, start?}};
    bits 16: the model's cache stays unquantized whatever the server's default."""
    schemes = {}
    for item in parse_list(text):
        model, equals, scheme = item.partition("=")
        parts = scheme.split("/")
        if not equals or not model.strip() or not 1 <= len(parts) <= 3:
            raise ValueError(f"{item!r} is not MODEL=BITS[/GROUP_SIZE[/START]]")
        values = {"bits": parse_kv_bits(parts[0])}
        if len(parts) > 1:
            values["group_size"] = parse_kv_group_size(parts[1])
        if len(parts) > 2:
            values["start"] = parse_int(parts[2])
            if values["start"] < 0:
                raise ValueError(f"{item!r}: the start must be at least 0")
        schemes[model.strip()] = values
    return schemes


# HLG's knobs and their ranges: inference/protocol/sampling.py's HLG_LIMITS, repeated since
# this package imports no app (tests/test_labsettings.py checks that the two agree).
HLG_LIMITS = {"width": (0.0, 1000.0), "shoulder": (0.01, 1000.0), "toe": (0.01, 1000.0),
              "pivot_offset": (0.0, 1000.0)}  # fmt: skip


def parse_hlg(text: str) -> dict | None:
    """HLG sampling's server default: `on` (mlx-bun's knobs), `off`, knobs with or without
    a switch (`width=3,toe=8`, `off,toe=8`: the knobs for requests that turn it on), or
    the request's own JSON object (`{"width": 3}`). Given at all, it is on unless it says
    off. -> {"enabled": bool, the knobs it sets...}; blank: unset (None)."""
    text = text.strip()
    if not text:
        return None
    items = _hlg_object(text) if text.startswith("{") else _hlg_items(text)
    enabled = items.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError("enabled must be true or false")
    for name, value in items.items():
        if name not in HLG_LIMITS:
            raise ValueError(f"{name!r} is none of enabled, {', '.join(HLG_LIMITS)}")
        low, high = HLG_LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} is not a number")
        if not low <= value <= high:
            raise ValueError(f"{name} must be between {low:g} and {high:g}")
    return {"enabled": enabled, **{name: float(value) for name, value in items.items()}}


def _hlg_items(text: str) -> dict:
    items: dict = {}
    for item in parse_list(text):
        name, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            items["enabled"] = parse_bool(item)
        elif name == "enabled":
            items["enabled"] = parse_bool(value)
        else:
            items[name] = parse_float(value)
    return items


def _hlg_object(text: str) -> dict:
    try:
        items = json.loads(text)
    except ValueError:
        raise ValueError("not a JSON object") from None
    if not isinstance(items, dict):
        raise ValueError("not a JSON object")
    return {name: value for name, value in items.items() if value is not None}


# The shortest MLXLAB_WORKER_SECRET taken (inference/protocol/link.py derives keys from it).
MIN_SECRET_CHARS = 16


def _tcp_host(address: str) -> str | None:
    if not address.startswith("tcp://"):
        return None
    rest = address.removeprefix("tcp://")
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not tcp://HOST:PORT")
    return host.removeprefix("[").removesuffix("]")


def reaches_beyond_loopback(address: str) -> bool:
    """A tcp:// address other than loopback's (ipc:// stays on this host)."""
    host = _tcp_host(address)
    if host is None or host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return True


def parse_worker_addresses(text: str) -> dict[str, tuple[str, ...]]:
    """`big=tcp://gpu1:7001,big=tcp://gpu2:7001,small=tcp://10.0.0.5:7002` -> {model:
    its addresses}: a model named at several addresses has a replica at each."""
    workers: dict[str, tuple[str, ...]] = {}
    for item in parse_list(text):
        model, equals, address = item.partition("=")
        model, address = model.strip(), address.strip()
        if not equals or not model:
            raise ValueError(f"{item!r} is not MODEL=tcp://HOST:PORT")
        if not address.startswith(("tcp://", "ipc://")):
            raise ValueError(f"{address!r} is not tcp://HOST:PORT or ipc:///path")
        _tcp_host(address)
        if address in workers.get(model, ()):
            raise ValueError(f"{model}={address} is named twice")
        workers[model] = (*workers.get(model, ()), address)
    return workers


MAX_REPLICAS = 64


def parse_replica_counts(text: str) -> dict[str, int]:
    """`big=2,small=3` -> {model: local worker processes}."""
    counts = {}
    for item in parse_list(text):
        model, equals, count = item.partition("=")
        if not equals or not model.strip() or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not MODEL=N")
        if not 0 <= int(count) <= MAX_REPLICAS:
            raise ValueError(f"{item!r}: from 0 to {MAX_REPLICAS} replicas")
        counts[model.strip()] = int(count)
    return counts
