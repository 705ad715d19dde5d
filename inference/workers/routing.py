"""Which replica of a model takes a request: session, cached prefix, then load.

In this order, as SGLang's cache-aware router and llm-d's prefix-aware scheduler route:

1. a request naming a prompt-cache session goes to the replica that holds that session;
2. else to the replica that was sent the longest prefix of its prompt (a PrefixTree per
   replica, of what this web process routed there, cut back by what each answer's
   `cached_tokens` says the replica no longer held: `observe`), when that prefix is long
   enough to save a prefill worth having (PREFIX_MIN_CHARS);
3. else to the least loaded, ties to the longest prefix, then to the least used.

A replica holding `imbalance` more requests than the least loaded one loses its
affinity (1 and 2): past a batch's worth its request waits in its queue for a slot,
which costs more than the prefill the affinity saves (README.md, "Replicas").
Loads are this web process's own count of each replica's open requests.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from dataclasses import dataclass

from ..protocol import wire
from .prefix_tree import PrefixTree

# About 64 tokens: below it, the prefill a cache hit saves is under a tenth of a second
# on a 2-core CPU (~630 prompt tokens/s), less than a queue's wait elsewhere.
PREFIX_MIN_CHARS = 256
# Each replica's tree: about what a worker's prompt cache holds of a small model (its RAM
# tier of 16 entries, and some of its disk tier), in characters of routed prompts.
TREE_CHARS = 2_000_000
SESSIONS = 10_000  # sessions remembered per web process, least recently used out first
REASONS = ("session", "prefix", "load", "turn")  # why a request went where it went


@dataclass(frozen=True)
class RouteKey:
    """What a call's routing reads: its session, and its prompt as text."""

    session: str | None
    text: str
    owner: int = 0  # the text's first characters that name its cache entries' owner


@dataclass(frozen=True)
class Candidate:
    """A replica that can take a request now, and its load."""

    id: str
    load: int


def route_key(call: object) -> RouteKey:
    """The call's session (within its caller's scope) and a text whose prefixes follow the
    prompt's: the owner of the worker's cache entries first (scope, adapters, KV scheme,
    tools), then each message, so a conversation's next turn extends its last."""
    if not isinstance(call, wire.GenerateCall):
        return RouteKey(None, "")  # embeddings and reranking: no cache to follow
    owner = _canonical(
        [call.cache_scope, call.adapters, call.kv, call.chat and call.chat.tools,
         call.chat and call.chat.template_kwargs]
    )  # fmt: skip
    if call.chat is not None:
        body = "".join("\n" + _canonical(message) for message in call.chat.messages)
    else:
        body = "\n" + (call.text or "")
    session = f"{call.cache_scope}\0{call.cache_session}" if call.cache_session else None
    return RouteKey(session, owner + body, len(owner))


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_opaque)


def _opaque(value: object) -> str:
    # A media part's bytes stand as their length: its sha256 beside them names it.
    return f"<{len(value)} bytes>" if isinstance(value, bytes) else repr(value)


class Router:
    """The routing state of one model's replicas, kept by the supervisor's loop."""

    def __init__(
        self, imbalance: int, round_robin: bool = False, tree_chars: int = TREE_CHARS
    ) -> None:
        self.imbalance = max(imbalance, 1)
        self.round_robin = round_robin  # MLXLAB_REPLICA_ROUTING=round_robin
        self._turn = 0
        self.tree_chars = tree_chars
        self.trees: dict[str, PrefixTree] = {}
        self.sessions: OrderedDict[str, str] = OrderedDict()  # session -> replica id
        self.routed: Counter[tuple[str, str]] = Counter()  # (replica id, reason)

    def choose(self, candidates: list[Candidate], key: RouteKey) -> tuple[str, str]:
        """The replica id for the request, and why: session, prefix, load or turn."""
        if self.round_robin:
            self._turn += 1
            chosen = candidates[self._turn % len(candidates)].id
            self.routed[chosen, "turn"] += 1
            return chosen, "turn"
        least = min(candidate.load for candidate in candidates)
        fair = {c.id for c in candidates if c.load - least < self.imbalance}
        chosen, reason = None, "load"
        if key.session is not None and self.sessions.get(key.session) in fair:
            chosen, reason = self.sessions[key.session], "session"
        matches = {c.id: self._tree(c.id).match(key.text) for c in candidates} if key.text else {}
        if chosen is None and matches:
            # The longest prefix; of equal ones, the least loaded.
            best = max(
                (c for c in candidates if c.id in fair), key=lambda c: (matches[c.id], -c.load)
            )
            if matches[best.id] >= PREFIX_MIN_CHARS:
                chosen, reason = best.id, "prefix"
        if chosen is None:
            chosen = min(
                candidates,
                key=lambda c: (c.load, -matches.get(c.id, 0), sum(self._counts(c.id))),
            ).id
        self._record(chosen, reason, key)
        return chosen, reason

    def observe(self, replica_id: str, key: RouteKey, prompt_tokens: int, cached: int) -> None:
        """A replica's answer to a prompt routed there: it had `cached` of its
        `prompt_tokens` tokens. Past that share of the prompt (its owner's part always
        kept: other owners' entries are not in question), it held nothing along that
        prompt's path, which it now holds whole again."""
        tree = self.trees.get(replica_id)
        if tree is None or not key.text or prompt_tokens <= 0:
            return
        share = min(cached / prompt_tokens, 1.0)
        tree.cut(key.text, key.owner + int((len(key.text) - key.owner) * share))
        tree.insert(key.text)

    def forget(self, replica_id: str) -> None:
        """A replica gone for good (stopped, evicted): its tree and sessions go with it."""
        self.trees.pop(replica_id, None)
        for session in [s for s, holder in self.sessions.items() if holder == replica_id]:
            del self.sessions[session]

    def report(self, replica_id: str) -> dict:
        """What /engine shows of a replica's routing. Read from the web process's threads
        while the supervisor's loop routes: list() copies a dict in one step under the GIL."""
        tree = self.trees.get(replica_id)
        return {
            "routed": {reason: self.routed[replica_id, reason] for reason in REASONS},
            "prefix_chars": tree.chars if tree is not None else 0,
            "sessions": list(self.sessions.values()).count(replica_id),
        }

    def _tree(self, replica_id: str) -> PrefixTree:
        tree = self.trees.get(replica_id)
        if tree is None:
            tree = self.trees[replica_id] = PrefixTree(self.tree_chars)
        return tree

    def _counts(self, replica_id: str) -> list[int]:
        return [self.routed[replica_id, r] for r in REASONS]

    def _record(self, replica_id: str, reason: str, key: RouteKey) -> None:
        self.routed[replica_id, reason] += 1
        if key.text:
            self._tree(replica_id).insert(key.text)
        if key.session is not None:
            self.sessions[key.session] = replica_id
            self.sessions.move_to_end(key.session)
            while len(self.sessions) > SESSIONS:
                self.sessions.popitem(last=False)
