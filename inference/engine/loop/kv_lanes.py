"""Continuous batching across KV schemes: one generator ("lane") per scheme.

A batch shares one cache object per layer, and mlx-lm picks the attention kernel by that
object (a cache with `bits` takes the quantized one), so rows of different schemes can
not share a forward pass. The runner keeps one lane per (bits, group size) in use, and
the plain lane (key None: the model's own dtype, 16-bit on a GPU, float32 on the CPU
fast path). Each step runs every lane once: plain and quantized requests
are batched together within their lanes, side by side.

`quantized_kv_start`: a row whose scheme starts later runs in the plain lane until its
sequence holds that many tokens, then moves, with everything the generator keeps for it
(sampler, processors, stop matcher, its next token), into its quantized lane, its cache
quantized on the way as mlx-lm's `maybe_quantize_kv_cache` converts a whole cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ...protocol.sampling import KVScheme
from ..kv.rows import RowsQuantizedKVCache
from .generator import Generator

LaneKey = tuple[int, int] | None  # (bits, group size); None: plain (the model's dtype)

# Each generator numbers its rows from its own block, so a row keeps its uid when it moves.
UID_BLOCK = 1 << 40


def lane_label(key: LaneKey) -> str:
    return "plain" if key is None else f"{key[0]}-bit/{key[1]}"


class Lanes:
    """The runner's generators, by KV scheme, and which of them holds each row."""

    def __init__(self, factory: Callable[[int], Generator]) -> None:
        self._factory = factory
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

    def move_due(self, schemes: dict[int, KVScheme]) -> int:
        """Move the plain lane's generating rows that reached their scheme's start."""
        plain = self._lanes.get(None)
        if plain is None:
            return 0
        due: dict[LaneKey, list[int]] = {}
        for row in plain.decoding.rows:
            scheme = schemes.get(row.uid)
            if scheme is not None and len(row.tokens) >= scheme.start:
                due.setdefault(scheme.lane, []).append(row.uid)
        for key, uids in due.items():
            move_rows(plain, self.generator(key), uids, bits=key[0], group_size=key[1])
            self._lane_of.update(dict.fromkeys(uids, key))
        return sum(map(len, due.values()))

    def kv_bytes(self) -> dict[str, int]:
        """The KV cache bytes each lane holds now, by scheme."""
        return {lane_label(key): gen.prompt_cache_nbytes for key, gen in self._lanes.items()}


def move_rows(
    source: Generator, target: Generator, uids: list[int], *, bits: int, group_size: int
) -> None:
    """Hand generating rows from the plain generator to a quantized one, mid-generation,
    with everything they carry (sampler, processors, stop matcher, the token fed next),
    their caches quantized on the way."""
    decoding = source.decoding
    wanted = set(uids)
    rows, caches, pending, logprobs = decoding.take(
        [i for i, row in enumerate(decoding.rows) if row.uid in wanted]
    )
    caches = [
        RowsQuantizedKVCache.from_rows(layer, group_size=group_size, bits=bits) for layer in caches
    ]
    target.decoding.adopt(rows, caches, pending, logprobs)
