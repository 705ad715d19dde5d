"""Reuse the KV cache of the longest cached prompt prefix across requests.

mlx-lm's `LRUPromptCache` (a token trie with LRU eviction by entries and
bytes) does the bookkeeping, as in `mlx_lm.server`. This module adds what the
engine needs around it:

- A chat prompt comes with its boundary: where the generation primer begins, found by
  probing its template (prompting/cache_boundary.py). The KV cache is stored there
  during prefill: the next turn of the conversation starts with exactly those tokens,
  whatever the template does with the primer and the reply. A finished sequence also
  stores its whole cache (prompt and reply), which a trimmable cache serves to any
  prompt sharing a prefix with it.
- At least one prompt token is always left to compute, since the generator
  needs the logits of the last one.
- Entries belong to a scope (the caller, by default): a lookup only sees its own
  scope's entries, so `cached_tokens` never tells one user about another's prompts.
- The KV scheme (plain, or kv_bits/kv_group_size/quantized_kv_start, or a kv_config's
  per-layer schemes) belongs to the key, as the scope does: a plain request never gets a
  quantized cache, or the reverse, nor one of another layout.
- A request may name a session (`session_id`, or OpenAI's `prompt_cache_key`). A
  session's last finished sequence is kept apart from the LRU, one entry a session,
  each new turn replacing the last: other traffic cannot evict it, only older
  sessions past `max_sessions` can. An agent loop's next turn then finds its
  conversation however busy the server was in between (prompt_sessions.py).

- A prompt with images is keyed by another spelling of its tokens (media/prompt.py): each
  image's placeholders by its content hash, so that a prefix matches through the same
  images only. The rows prefill the real tokens; what they store is keyed on the way in.

- A second tier on disk (prompt_disk.py, under var/) keeps what this one stores across
  worker restarts: every store is also written there, in the background, and a lookup
  that finds a prefix on disk at least MIN_DISK_GAIN tokens longer than in RAM loads it
  (and keeps it in RAM).

Only the engine thread calls `lookup`, `expect` and `save_*`; `stats` and
`clear` may be called from any thread.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

from .disk_writer import DiskWriter
from .identity import adapters_identity, digest, kv_identity
from .prompt_disk import DiskTier
from .prompt_sessions import SessionTurns

log = logging.getLogger(__name__)

# Boundaries awaited for sequences that never reach them (cancelled) are forgotten past this.
MAX_AWAITED_BOUNDARIES = 1024
# The fewest tokens a disk entry must add to RAM's prefix to be read. A file is read whole
# on the engine thread, every row waiting: for the few tokens a new prompt shares past a
# chat template's prefix (its first words, say) prefill costs less than the read.
MIN_DISK_GAIN = 16


@dataclass(frozen=True)
class PromptCacheConfig:
    """Bounds of one model's prompt cache (MLXLAB_PROMPT_CACHE_ENTRIES / _MB); 0 entries: off."""

    max_entries: int = 16
    max_bytes: int = 1 << 30
    max_sessions: int = 16  # named sessions kept apart from the LRU, the oldest dropped
    disk_dir: Path | None = None  # the disk tier's folder (MLXLAB_PROMPT_CACHE_DIR)
    disk_max_bytes: int = 0  # its bound per model (MLXLAB_PROMPT_CACHE_DISK_MB); 0: no tier

    def __post_init__(self) -> None:
        if min(self.max_entries, self.max_bytes, self.max_sessions, self.disk_max_bytes) < 0:
            raise ValueError("prompt cache bounds must be at least 0")

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    @property
    def disk_enabled(self) -> bool:
        return self.enabled and self.disk_dir is not None and self.disk_max_bytes > 0


@dataclass(frozen=True)
class PromptPlan:
    """How to insert one prompt: its cached KV state and the segments left to compute."""

    cache: list | None  # a private copy of the cached KV state, or None (start empty)
    cached_tokens: int
    segments: list[list[int]]
    boundary: int | None  # store the KV cache once this many prompt tokens are in
    scope: object = ""  # whose entries it may read, and whose its own become (and scheme)
    session: str | None = None  # the session its finished cache is kept for
    keys: tuple[int, ...] | None = None  # the prompt as keyed (images by hash); None: as is

    def keyed(self, tokens: list[int]) -> list[int]:
        """A row's tokens (its prompt first) as the cache keys them."""
        if self.keys is None:
            return list(tokens)
        count = min(len(tokens), len(self.keys))
        return [*self.keys[:count], *tokens[count:]]


@dataclass
class PromptCacheStats:
    lookups: int = 0
    hits: int = 0
    cached_tokens: int = 0  # prompt tokens served from the cache, in all
    stores: int = 0
    entries: int = 0
    bytes: int = 0
    sessions: int = 0
    disk_enabled: bool = False
    disk_entries: int = 0  # the disk tier's files, their bytes, the lookups they served
    disk_bytes: int = 0
    disk_hits: int = 0
    disk_writes: int = 0
    disk_dropped: int = 0  # writes given up while the writer was too far behind


def _quantized_too_soon(cache: list | None, cached: int, start: int) -> bool:
    """A quantized entry trimmed below its scheme's start: a sequence that short is still
    unquantized, and its continuation would differ from an uncached run's."""
    quantized = cache is not None and any(hasattr(layer, "bits") for layer in cache)
    return quantized and cached < start


class PromptCache:
    """One model's prompt cache: lookups before prefill, stores during and after it."""

    def __init__(
        self,
        config: PromptCacheConfig,
        *,
        key: object,
        identity: dict | None = None,
        writer: DiskWriter | None = None,
    ):
        """`identity`: the model's (identity.model_identity), which the disk tier's
        entries are checked against; with a `writer`, the tier is on if configured."""
        self.config = config
        self.key = key  # the model (and, later, its adapter): entries never cross it
        self._model_key = key
        self.identity = identity
        self._adapters: list[dict] = []  # the adapter set's identity, for the disk tier
        self.disk: DiskTier | None = None
        if config.disk_enabled and identity is not None and writer is not None:
            folder = Path(config.disk_dir) / digest(identity)[:16]
            self.disk = DiskTier(folder, config.disk_max_bytes, writer)
        self._lru = LRUPromptCache(max(config.max_entries, 1), config.max_bytes)
        # generator uid -> (its plan, the boundary still awaited or None)
        self._owners: OrderedDict[int, tuple[PromptPlan, int | None]] = OrderedDict()
        self._sessions = SessionTurns()  # by (model key, scope, session)
        self._stats = PromptCacheStats()
        self._lock = threading.Lock()

    def lookup(
        self,
        prompt: list[int],
        scope: str = "",
        *,
        share: bool = False,
        session: str | None = None,
        kv: object | None = None,
        boundary: int | None = None,
        keys: list[int] | None = None,
    ) -> PromptPlan:
        """The plan for `prompt`: the longest prefix `scope` (or its `session`) has
        cached, then the rest.

        `share`: other sequences wait for this same prompt, so its cache is stored one
        token short of the end, where each of them can start from it. `kv`: the request's
        KV scheme (request.KVScheme), None for plain. `boundary`: where a chat prompt's
        next turn diverges (request.cache_boundary); its cache is stored there. `keys`: the
        prompt as a media prompt is keyed (request.prefill_key), matched in its place.
        """
        if kv is not None:  # entries of another scheme are out of sight
            scope = (scope, kv)
        key = prompt if keys is None else keys
        cache, cached = None, 0
        if self.config.enabled:
            with self._lock:
                cache, cached = self._nearest(key, scope)
                if session is not None:
                    kept, kept_tokens = self._sessions.prefix((self.key, scope, session), key)
                    if kept_tokens > cached:
                        cache, cached = kept, kept_tokens
                if self.disk is not None:
                    cache, cached = self._from_disk(key, scope, cache, cached)
                if kv is not None and _quantized_too_soon(cache, cached, kv.start):
                    cache, cached = None, 0
                self._stats.lookups += 1
                self._stats.hits += cached > 0
                self._stats.cached_tokens += cached
        boundary = self._boundary(prompt, boundary, share)
        keys = None if keys is None else tuple(keys)
        if boundary is None or boundary <= cached:
            return PromptPlan(cache, cached, [prompt[cached:]], None, scope, session, keys)
        segments = [prompt[cached:boundary], prompt[boundary:]]
        return PromptPlan(cache, cached, segments, boundary, scope, session, keys)

    def use_adapters(self, refs: tuple) -> None:
        """The batch's adapter set changed: caches made under another are out of sight."""
        names = tuple(ref.name for ref in refs)
        self.key = (self._model_key, *names) if names else self._model_key
        self._adapters = adapters_identity(refs)

    def _owner(self, scope) -> str:
        """Who a disk entry belongs to: model, adapter set, caller and KV scheme."""
        caller, kv = scope if isinstance(scope, tuple) else (scope, None)
        return digest(
            {
                "model": self.identity,
                "adapters": self._adapters,
                "scope": caller,
                "kv": kv_identity(kv),
            }
        )

    def _from_disk(self, prompt: list[int], scope, cache, cached: int):
        """The disk tier's entry when it holds more of `prompt` than RAM; kept in RAM."""
        entry, usable = self.disk.best(self._owner(scope), prompt)
        if entry is None or usable - cached < MIN_DISK_GAIN:
            return cache, cached
        loaded = self.disk.load(entry)
        if loaded is None:
            return cache, cached
        self._lru.insert_cache((self.key, scope), list(entry.tokens), loaded)
        kept = copy.deepcopy(loaded)
        if usable < len(entry.tokens):
            trim_prompt_cache(kept, len(entry.tokens) - usable)
        return kept, usable

    def _nearest(self, prompt: list[int], scope: str) -> tuple[list | None, int]:
        cache, rest = self._lru.fetch_nearest_cache((self.key, scope), prompt)
        cached = len(prompt) - len(rest)
        if cache is None or cached == 0:
            return None, 0
        if cached == len(prompt):  # an exact hit: recompute the last token for its logits
            if not can_trim_prompt_cache(cache):
                return None, 0
            trim_prompt_cache(cache, 1)
            cached -= 1
        return cache, cached

    def _boundary(self, prompt: list[int], boundary: int | None, share: bool) -> int | None:
        """Where to store the prompt's cache during prefill, if anywhere before its end."""
        if not self.config.enabled:
            return None
        if share:
            return len(prompt) - 1
        return boundary if boundary is not None and 0 < boundary < len(prompt) else None

    def expect(self, uid: int, plan: PromptPlan) -> None:
        """Remember `uid`'s plan, and to store its KV cache at the plan's boundary."""
        self._owners[uid] = (plan, plan.boundary)
        while len(self._owners) > MAX_AWAITED_BOUNDARIES:
            self._owners.popitem(last=False)

    def save_boundaries(self, generator, prompt_responses) -> None:
        """Store the caches of sequences whose prefill just finished a boundary segment."""
        uids = [
            r.uid
            for r in prompt_responses
            if r.end_of_segment
            and not r.end_of_prompt
            and self._owners.get(r.uid, (None, None))[1] is not None
        ]
        if not uids:
            return
        try:
            caches = generator.extract_cache(uids)
        except Exception:  # as in _store: never fail the batch for the cache's sake
            log.exception("could not extract prompt caches")
            return
        for uid, (cache, tokens) in caches.items():
            plan, boundary = self._owners[uid]
            if len(tokens) == boundary:  # not the generator's own split of the tail
                self._owners[uid] = (plan, None)
                self._store(plan.keyed(tokens), cache, plan.scope)

    def save_finished(self, response) -> None:
        """Store a finished sequence's whole cache (prompt and reply), keyed by its tokens:
        in the LRU, or as its session's last turn."""
        session = self._session_of(response.uid)
        plan, _ = self._owners.pop(response.uid, (None, None))
        if response.prompt_cache is None or not response.all_tokens:
            return
        scope = plan.scope if plan is not None else ""
        tokens = plan.keyed(response.all_tokens) if plan is not None else response.all_tokens
        if session is not None:
            self._keep_session(tokens, response.prompt_cache, scope, session)
        else:
            self._store(tokens, response.prompt_cache, scope)

    def dropped_at_once(self, finished: list) -> set[int]:
        """uids of rows finishing in one step that the step's later rows would evict from the
        LRU at once (more finish than it holds): copying their KV state out of the batch (a
        kernel a layer's keys and values, a row) would be for nothing. None with a disk
        tier, which writes every entry."""
        if self.disk is not None:
            return set()
        to_lru = [r.uid for r in finished if self._session_of(r.uid) is None]
        return set(to_lru[: max(0, len(to_lru) - self.config.max_entries)])

    def _session_of(self, uid: int) -> str | None:
        """The session whose last turn `uid`'s finished cache becomes; None: the LRU's."""
        plan, _ = self._owners.get(uid, (None, None))
        return plan.session if plan is not None and self.config.max_sessions > 0 else None

    def save_interrupted(self, uid: int, tokens: list[int], cache: list) -> None:
        """Store the KV state of `uid`, cancelled mid-generation, for its resumed retry."""
        plan, _ = self._owners.get(uid, (None, None))
        if plan is not None:
            tokens = plan.keyed(tokens)
        self._store(list(tokens), cache, plan.scope if plan is not None else "")

    def forget(self, uid: int) -> None:
        """`uid` left the batch without finishing (cancelled, failed)."""
        self._owners.pop(uid, None)

    def _store(self, tokens: list[int], cache: list, scope: str = "") -> None:
        if not self.config.enabled:
            return
        try:
            self._detach(cache)
            with self._lock:
                self._lru.insert_cache((self.key, scope), list(tokens), cache)
                self._stats.stores += 1
            self._write_behind(tokens, cache, scope)
        except Exception:  # a cache that can't store must never fail a generation
            log.exception("could not store a prompt cache entry")

    def _detach(self, cache: list) -> None:
        """Copy a row's KV state out of the batch's buffers, so that they can be freed.

        Queued, not waited for: a wait here stalls the decode pipeline (the next step is
        already on the device) once per finished row. Reads later on this thread wait as
        needed; the disk tier hands its own copies to its writer only once computed.
        """
        mx.async_eval([c.state for c in cache])

    def _write_behind(self, tokens: list[int], cache: list, scope) -> None:
        """Hand the entry to the disk tier (its copy is made here, its write elsewhere)."""
        if self.disk is not None:
            self.disk.put(self._owner(scope), tokens, cache)

    def _keep_session(self, tokens: list[int], cache: list, scope: str, session: str) -> None:
        if not self.config.enabled:
            return
        try:
            self._detach(cache)
            with self._lock:
                # Sessions are bounded by count, and together by the cache's byte bound.
                bounds = {"most": self.config.max_sessions, "max_bytes": self.config.max_bytes}
                self._sessions.keep((self.key, scope, session), tokens, cache, **bounds)
                self._stats.stores += 1
            self._write_behind(tokens, cache, scope)
        except Exception:  # as in _store
            log.exception("could not keep a prompt cache session")

    def stats(self) -> PromptCacheStats:
        with self._lock:
            return PromptCacheStats(
                **{
                    **vars(self._stats),
                    "entries": len(self._lru) + len(self._sessions),
                    "bytes": self._lru.nbytes + self._sessions.nbytes,
                    "sessions": len(self._sessions),
                    **(self.disk.stats() if self.disk is not None else {}),
                    "disk_enabled": self.disk is not None,
                }
            )

    def stepped(self) -> None:
        """The engine ran a step (the disk tier's queued copies age)."""
        if self.disk is not None:
            self.disk.stepped()

    def hand_over(self) -> None:
        """Nothing overlaps the disk tier's queued copies any more: to its writer now."""
        if self.disk is not None:
            self.disk.hand_over()

    def clear(self) -> None:
        with self._lock:
            self._lru.trim_to(n_sequences=0)
            self._sessions.clear()
