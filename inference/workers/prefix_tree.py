"""An approximate radix tree of the prompts the web tier sent to one replica.

SGLang's cache-aware router keeps such a tree per worker, of the texts it routed there,
and evicts the least recently used leaves past a size bound: it approximates what the
worker's prompt cache holds without asking it. `match` says how many leading characters
of a prompt the replica was last sent, so a conversation's next turn finds the replica
that prefilled its earlier ones. `cut` corrects it from what the replica reports: past the
prefix it said it had cached of a prompt, it holds nothing along that prompt's path.
"""

from __future__ import annotations

import itertools


class _Node:
    __slots__ = ("children", "edge", "parent", "used")

    def __init__(self, edge: str, parent: _Node | None, used: int) -> None:
        self.edge = edge  # the characters from the parent to this node
        self.parent = parent
        self.children: dict[str, _Node] = {}  # by each child's first character
        self.used = used


def _common(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    i = 0
    while i < limit and a[i] == b[i]:
        i += 1
    return i


class PrefixTree:
    """Texts under a bound of `max_chars` stored characters, least recently used out first."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0  # the characters the tree's edges hold
        self._clock = itertools.count(1)
        self._root = _Node("", None, 0)

    def match(self, text: str) -> int:
        """How many leading characters of `text` the tree holds (touching what matched)."""
        node, matched, now = self._root, 0, next(self._clock)
        while matched < len(text):
            child = node.children.get(text[matched])
            if child is None:
                break
            shared = _common(child.edge, text[matched:])
            matched += shared
            child.used = now
            if shared < len(child.edge):
                break
            node = child
        return matched

    def insert(self, text: str) -> None:
        node, at, now = self._root, 0, next(self._clock)
        while at < len(text):
            child = node.children.get(text[at])
            if child is None:
                node.children[text[at]] = _Node(text[at:], node, now)
                self.chars += len(text) - at
                break
            shared = _common(child.edge, text[at:])
            if shared < len(child.edge):
                child = self._split(child, shared)
            child.used = now
            node, at = child, at + shared
        if self.chars > self.max_chars:
            self._evict()

    def cut(self, text: str, keep: int) -> None:
        """Let go of all the tree holds past `text`'s first `keep` characters along its
        path: what shares more than those with it, the replica was found not to hold."""
        node, at = self._root, 0
        while at < len(text):
            child = node.children.get(text[at])
            if child is None:
                return
            shared = _common(child.edge, text[at:])
            if at + shared > keep:  # the cut falls in this edge (or at its start)
                if keep > at:
                    child = self._split(child, keep - at)
                    node, child = child, next(iter(child.children.values()))
                self._drop(node, child)
                return
            if shared < len(child.edge):
                return
            node, at = child, at + shared

    def _drop(self, parent: _Node, child: _Node) -> None:
        """Remove `child` and everything under it."""
        del parent.children[child.edge[0]]
        stack = [child]
        while stack:
            node = stack.pop()
            self.chars -= len(node.edge)
            stack.extend(node.children.values())
        child.parent = None

    def _split(self, child: _Node, at: int) -> _Node:
        """Cut `child`'s edge after `at` characters; the new middle node is returned."""
        parent = child.parent
        middle = _Node(child.edge[:at], parent, child.used)
        parent.children[middle.edge[0]] = middle
        child.edge = child.edge[at:]
        child.parent = middle
        middle.children[child.edge[0]] = child
        return middle

    def _evict(self) -> None:
        """Drop least recently used leaves until a tenth of the bound is free (in batches:
        a sort per insert would cost more than the requests it routes)."""
        target = self.max_chars * 9 // 10
        while self.chars > target:
            leaves = sorted(self._leaves(), key=lambda node: node.used)
            if not leaves:
                return
            for leaf in leaves:
                if self.chars <= target:
                    return
                if leaf.parent is not None and not leaf.children:  # not merged away meanwhile
                    self._remove(leaf)

    def _leaves(self) -> list[_Node]:
        found, stack = [], list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                found.append(node)
        return found

    def _remove(self, leaf: _Node) -> None:
        parent = leaf.parent
        del parent.children[leaf.edge[0]]
        self.chars -= len(leaf.edge)
        # A parent left with one child and no text of its own ending there is merged into
        # it, so edges stay compressed (which text ended where is not kept: approximate).
        if parent is not self._root and len(parent.children) == 1:
            (only,) = parent.children.values()
            parent.edge += only.edge
            parent.children = only.children
            for grandchild in parent.children.values():
                grandchild.parent = parent
            parent.used = max(parent.used, only.used)
            only.parent = None
