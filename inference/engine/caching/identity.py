"""Whose KV state it is: a model's weights and how they run, an adapter set; and the
canonical JSON and digests that name them.

A prompt cache entry kept on disk (prompt_disk.py) and a generation's checkpoint
(checkpoints.py) are reused only under the same model, adapters, execution and KV scheme. A folder's
fingerprint comes from its weight and config files' names, sizes and modification times:
a re-import, a conversion in place or a retrained adapter changes it, and no start pays
for hashing gigabytes of weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from ..acceleration.accelerator import device_name

FINGERPRINTED = ("*.safetensors", "*.json", "*.gguf")


def _canonical(value):
    if isinstance(value, dict):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def canonical_json(value) -> str:
    """`value` as JSON with every object's keys sorted (as strings); arrays keep their order."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value) -> str:
    """The sha256 of `value`'s canonical JSON, in hex."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def files_fingerprint(folder: str | Path) -> str:
    """A digest of the folder's weight and config files: name, size, modification time."""
    folder = Path(folder)
    files = sorted({path for pattern in FINGERPRINTED for path in folder.glob(pattern)})
    entries = []
    for path in files:
        try:
            stat = path.stat()  # through a symlink: the file itself
        except OSError:
            continue
        entries.append([path.name, stat.st_size, stat.st_mtime_ns])
    return digest(entries)[:32]


def model_identity(loaded) -> dict:
    """The loaded model (engine.loader.LoadedModel) as its KV states depend on it."""
    return {
        "path": str(loaded.path),
        "weights": files_fingerprint(loaded.path),
        "execution": loaded.fast_path.path,  # kernel, dense float32, MLX's quantized...
        "kv_cache": loaded.fast_path.kv_cache,  # the fused layers' float16 or float32
        "device": device_name(),
    }


def adapters_identity(refs) -> list[dict]:
    """An adapter set (adapters.AdapterRef, in order) with each one's fingerprint."""
    return [
        {"name": ref.name, "path": ref.path, "weights": files_fingerprint(ref.path)} for ref in refs
    ]


def kv_identity(scheme) -> dict | None:
    """A KV scheme (protocol.sampling.KVScheme) as checkpoint keys and disk entries name it:
    a uniform one by its bits, group size and start, as before kv_config (so their keys are
    unchanged); a per-layer one by its layers and start."""
    if scheme is None:
        return None
    named = asdict(scheme)
    for unused in ("layers",) if scheme.layers is None else ("bits", "group_size"):
        del named[unused]
    return named
