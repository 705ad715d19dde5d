"""Continuous batching across KV schemes: one generator ("lane") per layout.

A batch shares one cache object per layer, and mlx-lm picks the attention kernel by that
object (a cache with `bits` takes the quantized one), so rows whose layers differ can not
share a forward pass. A lane's key is its layout: each layer's scheme (bits, group size),
or None for a plain layer; a kv_config mixes them, kv_bits gives every layer the same. The
runner keeps one lane per layout in use, and the plain lane (key None: the model's own
dtype, 16-bit on a GPU, float32 on the CPU fast path). Each step runs every lane once:
requests of one layout are batched together within their lane, lanes side by side.

`quantized_kv_start`: a row whose scheme starts later runs in the plain lane until its
sequence holds that many tokens, then moves, with everything the generator keeps for it
(sampler, processors, stop matcher, its next token), into its layout's lane, the layers its
scheme names quantized on the way as mlx-lm's `maybe_quantize_kv_cache` converts a cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict

from mlx_lm.models.cache import KVCache

from ...protocol.sampling import KVLayer, KVScheme
from ..kv.rows import QuantizedRowCache, RowsQuantizedKVCache
from .generator import Generator

# Each layer's scheme (None: plain); the whole key None: every layer plain (the model's dtype).
LaneKey = tuple[KVLayer | None, ...] | None

MAX_LAYOUTS = 64  # layouts remembered (Lanes.layout)
# Each generator numbers its rows from its own block, so a row keeps its uid when it moves.
UID_BLOCK = 1 << 40


def lane_key(layers: tuple[KVLayer | None, ...]) -> LaneKey:
    """The lane of rows whose layers keep these schemes: None where every layer is plain."""
    return None if all(layer is None for layer in layers) else tuple(layers)


def lane_label(key: LaneKey) -> str:
    """The lane's name in reports: plain, 8-bit/64 (every layer), or a mixed layout's runs
    of layers (mixed 8-bit/64×2 plain×1)."""
    if key is None:
        return "plain"
    runs = [(layer, len(list(group))) for layer, group in itertools.groupby(key)]
    if len(runs) == 1:
        return runs[0][0].label
    return "mixed " + " ".join(f"{layer.label if layer else 'plain'}×{n}" for layer, n in runs)


class Lanes:
    """The runner's generators, by KV scheme, and which of them holds each row."""

    def __init__(self, factory: Callable[[int], Generator], *, kv_layers: int) -> None:
        """`kv_layers`: the model's cache layers, which a scheme's layout covers."""
        self._factory = factory
        self._kv_layers = kv_layers
        self._layouts: dict[tuple, LaneKey] = {}  # (bits, group size, layers) -> lane
        self._lanes: dict[LaneKey, Generator] = {}
        self._blocks = itertools.count()
        self._lane_of: dict[int, LaneKey] = {}  # uid -> the lane holding it

    def generator(self, key: LaneKey) -> Generator:
        if key not in self._lanes:
            self._lanes[key] = self._factory(next(self._blocks) * UID_BLOCK)
        return self._lanes[key]

    def items(self) -> list[tuple[LaneKey, Generator]]:
        return list(self._lanes.items())

    def insert(self, key: LaneKey, *args, **options) -> int:
        """Insert one sequence (Generator.insert_segments' arguments) into a lane."""
        (uid,) = self.generator(key).insert_segments(*args, **options)
        self._lane_of[uid] = key
        return uid

    def lane_of(self, uid: int) -> LaneKey:
        return self._lane_of.get(uid)

    def remove(self, uid: int) -> None:
        key = self._lane_of.pop(uid, None)
        if key in self._lanes:
            self._lanes[key].remove([uid])

    def forget(self, uid: int) -> None:
        """`uid` left its generator by itself (finished)."""
        self._lane_of.pop(uid, None)

    def reset(self) -> None:
        """Drop every generator (after a failed step); lanes start afresh when used."""
        for generator in self._lanes.values():
            generator.close()
        self._lanes.clear()
        self._lane_of.clear()

    def layout(self, scheme: KVScheme | None) -> LaneKey:
        """The lane of a KV scheme: each of the model's cache layers' scheme (lane_key)."""
        if scheme is None:
            return None
        key = (scheme.bits, scheme.group_size, scheme.layers)
        if key not in self._layouts:
            if len(self._layouts) >= MAX_LAYOUTS:  # clients choose them: bounded
                self._layouts.clear()
            self._layouts[key] = lane_key(scheme.per_layer(self._kv_layers))
        return self._layouts[key]

    def lane_for(self, scheme: KVScheme | None, cache: list | None) -> tuple[LaneKey, list | None]:
        """The lane a new row of this scheme joins, and its starting cache.

        A quantized scheme's row starts in its layout's lane when it begins quantized
        (start 0, or a cached prefix already quantized); otherwise in the plain lane, until
        its start.
        """
        layout = self.layout(scheme)
        if layout is None:
            return None, cache
        if cache is not None and any(isinstance(layer, QuantizedRowCache) for layer in cache):
            return layout, cache
        if cache is None and scheme.start == 0:
            fresh = [
                KVCache() if layer is None else QuantizedRowCache(layer.group_size, layer.bits)
                for layer in layout
            ]
            return layout, fresh
        return None, cache

    def move_due(self, schemes: dict[int, KVScheme | None]) -> int:
        """Move the plain lane's generating rows that reached their scheme's start
        (`schemes`: uid -> the row's scheme)."""
        plain = self._lanes.get(None)
        if plain is None:
            return 0
        due: dict[LaneKey, list[int]] = {}
        for row in plain.decoding.rows:
            scheme = schemes.get(row.uid)
            if scheme is None or len(row.tokens) < scheme.start:
                continue
            if (layout := self.layout(scheme)) is not None:  # None: a layout of plain layers
                due.setdefault(layout, []).append(row.uid)
        for key, uids in due.items():
            move_rows(plain, self.generator(key), uids, key)
            self._lane_of.update(dict.fromkeys(uids, key))
        return sum(map(len, due.values()))

    def kv_bytes(self) -> dict[str, int]:
        """The KV cache bytes each lane holds now, by scheme."""
        return {lane_label(key): gen.prompt_cache_nbytes for key, gen in self._lanes.items()}


def move_rows(source: Generator, target: Generator, uids: list[int], layers: LaneKey) -> None:
    """Hand generating rows from the plain generator to a quantized one, mid-generation,
    with everything they carry (sampler, processors, stop matcher, the token fed next),
    each layer's cache quantized on the way as `layers` says (a None layer stays plain)."""
    decoding = source.decoding
    wanted = set(uids)
    rows, caches, pending, logprobs = decoding.take(
        [i for i, row in enumerate(decoding.rows) if row.uid in wanted]
    )
    caches = [
        cache if layer is None else RowsQuantizedKVCache.from_rows(cache, **asdict(layer))
        for cache, layer in zip(caches, layers, strict=True)
    ]
    target.decoding.adopt(rows, caches, pending, logprobs)
