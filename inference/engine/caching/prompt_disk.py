"""The prompt cache's disk tier: KV caches kept under var/ across worker restarts.

Every entry the RAM tier stores (prompt_cache.py) is also written here, off the decode
path: the engine thread queues contiguous copies of the entry's keys and values behind
the steps already on the device, hands them to the DiskWriter's thread once a later step
has been waited for (they are computed by then, so no MLX array is ever computed on two
threads, and the decode pipeline never stops for them), and that thread writes them to a
safetensors file of their own, as mlx-lm's `save_prompt_cache` does, with a header
naming the entry's owner and tokens. The index of the folder (each
file's header, read without its arrays) answers lookups; when it holds a longer prefix
of a prompt than RAM does, the engine thread loads that file and the RAM tier keeps it.

Owners: a folder per model identity (path, weights fingerprint, execution: identity.py),
and in it each file records the digest of its owner: the model again, the adapter set
(names, folders, fingerprints), the caller's scope and the KV scheme. A lookup sees only
its own owner's files, so nothing crosses a model, an adapter set, a caller or a scheme.

Bounded per model (MLXLAB_PROMPT_CACHE_DISK_MB): past the bound the least recently used
files go (a hit refreshes a file's time). A file whose tokens another of its owner's
files extends is deleted when the longer one lands: the longer one serves every prefix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from ..drafts.drafting import common_prefix
from ..kv.rows import QuantizedRowCache
from .disk_writer import DiskWriter
from .identity import digest

log = logging.getLogger(__name__)

HEADER_KEY = "mlxlab_prompt_cache"
VERSION = 1
SUFFIX = ".safetensors"
MAX_HEADER_BYTES = 64 << 20
STALE_TEMP_SECONDS = 3600  # a temporary file this old was left by a killed writer
# Steps an entry's copies wait before the writer gets them. They are queued while the
# next step is already on the device, so the step after that one is the first whose
# wait (its tokens read on the host) covers them: evaluating them then costs nothing,
# where evaluating them at once stalled the pipeline twice per stored entry.
RIPE_AFTER_STEPS = 2


@dataclass
class DiskEntry:
    name: str
    owner: str
    tokens: tuple[int, ...]
    nbytes: int
    used: float  # the file's modification time: written or last hit


def read_header(path: Path) -> dict | None:
    """A tier file's header, from the safetensors JSON header alone (no array is read)."""
    with open(path, "rb") as file:
        size = int.from_bytes(file.read(8), "little")
        if not 0 < size <= MAX_HEADER_BYTES:
            return None
        header = json.loads(file.read(size))
    text = header.get("__metadata__", {}).get(HEADER_KEY)
    return json.loads(text) if text else None


def pack(cache: list) -> tuple[dict[str, mx.array], list[dict]] | None:
    """Contiguous copies of a row cache's keys and values (queued, not waited for) and how
    to rebuild it; None for a kind of cache this tier does not keep (rotating, recurrent)
    or an empty one."""
    arrays: dict[str, mx.array] = {}
    layers: list[dict] = []
    for index, layer in enumerate(cache):
        if layer.empty() or not layer.offset:
            return None
        used = layer.offset
        if isinstance(layer, QuantizedKVCache):
            for name, parts in (("k", layer.keys), ("v", layer.values)):
                for part_index, part in enumerate(parts):
                    arrays[f"{index}.{name}.{part_index}"] = mx.contiguous(part[..., :used, :])
            scheme = {"bits": layer.bits, "group_size": layer.group_size}
            layers.append({"kind": "quantized", "parts": len(layer.keys), **scheme})
        elif type(layer) is KVCache:
            arrays[f"{index}.k"] = mx.contiguous(layer.keys[..., :used, :])
            arrays[f"{index}.v"] = mx.contiguous(layer.values[..., :used, :])
            layers.append({"kind": "plain"})
        else:
            return None
    mx.async_eval(list(arrays.values()))
    return arrays, layers


def unpack(arrays: dict[str, mx.array], layers: list[dict]) -> list:
    cache = []
    for index, layer in enumerate(layers):
        if layer["kind"] == "quantized":
            row = QuantizedRowCache(group_size=layer["group_size"], bits=layer["bits"])
            parts = range(layer["parts"])
            row.keys = tuple(arrays[f"{index}.k.{part}"] for part in parts)
            row.values = tuple(arrays[f"{index}.v.{part}"] for part in parts)
            row.offset = row.keys[0].shape[2]
        else:
            row = KVCache()
            row.keys, row.values = arrays[f"{index}.k"], arrays[f"{index}.v"]
            row.offset = row.keys.shape[2]
        cache.append(row)
    mx.eval([row.state for row in cache])
    return cache


@dataclass
class _Ripening:
    """An entry whose copies are queued on the device, not yet the writer's."""

    name: str
    arrays: dict[str, mx.array]
    header: dict
    nbytes: int
    queued_at: int  # the tier's step count when queued


class DiskTier:
    """One model's folder of cached KV states. `best`, `load`, `put`, `stepped` and
    `hand_over` run on the engine thread; files are written and deleted on the writer's
    thread; `stats` anywhere."""

    def __init__(self, folder: Path, max_bytes: int, writer: DiskWriter) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.writer = writer
        self._lock = threading.Lock()
        self._entries: dict[str, DiskEntry] = {}  # file name -> entry
        self._bytes = 0
        self.hits = 0
        self.writes = 0
        self.dropped = 0  # writes given up: the writer was too far behind
        self._ripening: list[_Ripening] = []  # oldest first; the engine thread's alone
        self._steps = 0
        self.folder.mkdir(parents=True, exist_ok=True)
        self._scan()

    # -- the index --------------------------------------------------------------------

    def _scan(self) -> None:
        """Index the folder's files (a restart finds what the last process wrote)."""
        now = time.time()
        for path in self.folder.iterdir():
            if path.name.startswith("."):  # a write that never finished
                if now - _mtime(path) > STALE_TEMP_SECONDS:
                    path.unlink(missing_ok=True)
                continue
            if path.suffix != SUFFIX:
                continue
            try:
                header = read_header(path)
                if header is None or header.get("version") != VERSION:
                    raise ValueError("not an entry of this version")
                stat = path.stat()
                entry = DiskEntry(
                    path.name, header["owner"], tuple(header["tokens"]), stat.st_size, stat.st_mtime
                )
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("dropping unreadable prompt cache file %s", path)
                path.unlink(missing_ok=True)
                continue
            self._entries[entry.name] = entry
            self._bytes += entry.nbytes
        with self._lock:
            self._prune()

    def best(self, owner: str, prompt: list[int]) -> tuple[DiskEntry | None, int]:
        """`owner`'s entry sharing the longest prefix with `prompt`, and how many of its
        tokens are usable (never the prompt's last one: its logits are needed)."""
        target = tuple(prompt)
        with self._lock:
            candidates = [e for e in self._entries.values() if e.owner == owner]
        top, usable = None, 0
        for entry in candidates:
            shared = min(common_prefix(entry.tokens, target), len(target) - 1)
            if shared > usable:
                top, usable = entry, shared
        return top, usable

    def load(self, entry: DiskEntry) -> list | None:
        """The entry's KV cache, whole; None when its file is gone or unreadable."""
        try:
            arrays, metadata = mx.load(str(self.folder / entry.name), return_metadata=True)
            cache = unpack(arrays, json.loads(metadata[HEADER_KEY])["layers"])
            if cache[0].offset != len(entry.tokens):
                raise ValueError("its cache does not hold its tokens")
        except Exception as exc:  # deleted under us, or damaged: a miss
            log.warning("prompt cache file %s unusable: %s", entry.name, exc)
            with self._lock:
                self._remove(entry.name)
            return None
        self.hits += 1
        self.writer.submit(lambda: self._touch(entry.name))
        return cache

    # -- writing ----------------------------------------------------------------------

    def put(self, owner: str, tokens: list[int], cache: list) -> None:
        """Write `cache` (holding `tokens`) for `owner`, in the background: its copies are
        queued now and go to the writer a few steps later (`stepped`, `hand_over`)."""
        name = digest([owner, list(tokens)])[:40] + SUFFIX
        with self._lock:
            if name in self._entries:  # the same state is on disk already
                self.writer.submit(lambda: self._touch(name))
                return
        if any(entry.name == name for entry in self._ripening):
            return
        packed = pack(cache)
        if packed is None:
            return
        arrays, layers = packed
        nbytes = sum(array.nbytes for array in arrays.values())
        if nbytes > self.max_bytes:
            return
        header = {"version": VERSION, "owner": owner, "tokens": list(tokens), "layers": layers}
        self._ripening.append(_Ripening(name, arrays, header, nbytes, self._steps))

    def stepped(self) -> None:
        """The engine ran a step: entries queued long enough ago go to the writer."""
        self._steps += 1
        due = self._steps - RIPE_AFTER_STEPS
        ripe = 0
        while ripe < len(self._ripening) and self._ripening[ripe].queued_at <= due:
            ripe += 1
        if ripe:
            entries, self._ripening = self._ripening[:ripe], self._ripening[ripe:]
            self._submit(entries)

    def hand_over(self) -> None:
        """Every queued entry to the writer now (the batch is empty, or the engine stops:
        no pipeline to keep going)."""
        if self._ripening:
            ripe, self._ripening = self._ripening, []
            self._submit(ripe)

    def _submit(self, entries: list[_Ripening]) -> None:
        # Computed by now (or waited for here, where nothing is left to overlap): the
        # writer's thread only reads them.
        mx.eval([array for entry in entries for array in entry.arrays.values()])
        for entry in entries:
            job = lambda e=entry: self._write(e.name, e.arrays, e.header)  # noqa: E731
            if not self.writer.submit(job, entry.nbytes):
                self.dropped += 1

    def _write(self, name: str, arrays: dict, header: dict) -> None:
        temporary = self.folder / f".{uuid.uuid4().hex}{SUFFIX}"
        try:
            mx.save_safetensors(str(temporary), arrays, {HEADER_KEY: json.dumps(header)})
            os.replace(temporary, self.folder / name)
        finally:
            temporary.unlink(missing_ok=True)
        tokens = tuple(header["tokens"])
        size = (self.folder / name).stat().st_size
        with self._lock:
            replaced = self._entries.pop(name, None)  # the same state, written twice
            self._bytes -= replaced.nbytes if replaced is not None else 0
            self._entries[name] = DiskEntry(name, header["owner"], tokens, size, time.time())
            self._bytes += size
            self.writes += 1
            for other in [e for e in self._entries.values() if e.owner == header["owner"]]:
                shorter = len(other.tokens) < len(tokens)
                if shorter and tokens[: len(other.tokens)] == other.tokens:
                    self._remove(other.name)
            self._prune()

    def _touch(self, name: str) -> None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return
            entry.used = time.time()
        with contextlib.suppress(OSError):  # deleted meanwhile
            os.utime(self.folder / name)

    def _prune(self) -> None:
        """Least recently used files out until the folder fits its bound (lock held)."""
        while self._bytes > self.max_bytes and self._entries:
            oldest = min(self._entries.values(), key=lambda entry: entry.used)
            self._remove(oldest.name)

    def _remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._bytes -= entry.nbytes
            (self.folder / name).unlink(missing_ok=True)

    def clear(self) -> None:
        # A write queued before the clear must not land after it and bring an entry back.
        self._ripening = []
        self.writer.flush(timeout=30)
        with self._lock:
            for name in list(self._entries):
                self._remove(name)

    def stats(self) -> dict:
        with self._lock:
            return {
                "disk_entries": len(self._entries),
                "disk_bytes": self._bytes,
                "disk_hits": self.hits,
                "disk_writes": self.writes,
                "disk_dropped": self.dropped,
            }


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
