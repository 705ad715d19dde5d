"""The web tier's choice of a replica (inference/workers/routing.py), without processes:
the prefix tree, and the order session, prefix, load with the imbalance bound."""

from __future__ import annotations

import pytest

from inference.protocol import wire
from inference.workers.prefix_tree import PrefixTree
from inference.workers.routing import (
    PREFIX_MIN_CHARS,
    Candidate,
    RouteKey,
    Router,
    route_key,
)
from inference.workers.streams import EngineUnavailable
from inference.workers.supervisor import Supervisor
from inference.workers.worker import SupervisorConfig


def test_the_tree_matches_the_longest_prefix_it_holds():
    tree = PrefixTree(max_chars=10_000)
    tree.insert("hello world")
    tree.insert("hello there")
    assert tree.match("hello world, again") == len("hello world")
    assert tree.match("hello th") == len("hello th")
    assert tree.match("help") == len("hel")
    assert tree.match("goodbye") == 0
    assert tree.chars == len("hello ") + len("world") + len("there")


def test_the_tree_evicts_the_least_recently_used_past_its_bound():
    tree = PrefixTree(max_chars=100)
    tree.insert("a" * 40)
    tree.insert("b" * 40)
    tree.match("a" * 40)  # a hit: "a" is now the more recent
    tree.insert("c" * 40)  # 120 > 100: the least recently used goes
    assert tree.chars <= 90
    assert tree.match("a" * 40) == 40 and tree.match("c" * 40) == 40
    assert tree.match("b" * 40) == 0


def test_eviction_keeps_edges_whole():
    tree = PrefixTree(max_chars=60)
    tree.insert("x" * 20 + "first")
    tree.insert("x" * 20 + "second")
    tree.insert("y" * 30)  # over: the older branch goes, its sibling merges into the stem
    assert tree.match("x" * 20 + "second") == 26
    assert tree.match("x" * 20 + "first") == 20


def test_a_cut_lets_go_of_what_shares_more_than_the_kept_prefix():
    tree = PrefixTree(max_chars=10_000)
    for text in ("stem/one/a", "stem/one/b", "stem/two", "other"):
        tree.insert(text)
    tree.cut("stem/one/c", len("stem/o"))  # in the middle of an edge
    assert tree.match("stem/one/a") == tree.match("stem/one/b") == len("stem/o")
    assert tree.match("stem/two") == len("stem/two") and tree.match("other") == len("other")
    assert tree.chars == len("stem/") + len("o") + len("two") + len("other")
    tree.cut("stem/two", 0)  # from the root: everything along its path
    assert tree.match("stem/o") == 0 and tree.chars == len("other")
    tree.cut("other", len("other"))  # nothing past a whole match
    assert tree.match("other") == len("other")


def test_an_answer_s_cached_tokens_correct_the_tree():
    """A replica that had only part of a conversation cached (it evicted the rest) holds
    no branch sharing more with it; what it answered it holds whole again."""
    router = Router(imbalance=8)
    first, second = _chat("a" * 400, "b" * 300), _chat("a" * 400, "c" * 300)
    for call in (first, second):
        router.choose([Candidate("r", 0)], route_key(call))
    third = route_key(_chat("a" * 400, "d" * 300))
    router.observe("r", third, prompt_tokens=100, cached=40)  # about the shared "a"s
    tree, gone = router.trees["r"], route_key(second).text
    shared = next(i for i, (x, y) in enumerate(zip(gone, third.text, strict=True)) if x != y)
    assert tree.match(gone) == shared < len(gone)  # its own branch is gone
    assert tree.match(third.text) == len(third.text)
    owner_only = route_key(_chat("zzz"))
    router.observe("r", owner_only, prompt_tokens=10, cached=0)  # another owner's stay
    assert tree.match(third.text) >= third.owner


def _chat(*contents: str, session: str | None = None) -> wire.GenerateCall:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(contents)
    ]
    return wire.GenerateCall(chat=wire.ChatInput(messages=messages), cache_session=session)


def test_a_conversations_next_turn_extends_its_key():
    long = "A question that is long enough to matter. " * 10
    first = route_key(_chat(long)).text
    second = route_key(_chat(long, "An answer.", "And then?")).text
    assert second.startswith(first)
    other_caller = route_key(wire.GenerateCall(chat=_chat(long).chat, cache_scope="user:2"))
    assert not other_caller.text.startswith(first[:20])  # another caller's cache is not ours
    assert route_key(wire.EmbedCall(texts=["x"])) == RouteKey(None, "")


def test_a_long_shared_prefix_wins_over_load_until_the_imbalance():
    router = Router(imbalance=3)
    text = "p" * PREFIX_MIN_CHARS
    assert router.choose([Candidate("a", 0), Candidate("b", 0)], RouteKey(None, text)) == (
        "a",
        "load",
    )
    key = RouteKey(None, text + " and more")
    assert router.choose([Candidate("a", 2), Candidate("b", 0)], key) == ("a", "prefix")
    # Three more requests than the least loaded: the affinity is lost, to the least loaded.
    assert router.choose([Candidate("a", 3), Candidate("b", 0)], key) == ("b", "load")


def test_a_short_prefix_only_breaks_ties_and_sessions_stick():
    router = Router(imbalance=8)
    router.choose([Candidate("a", 0), Candidate("b", 0)], RouteKey(None, "short"))
    assert router.choose([Candidate("a", 0), Candidate("b", 0)], RouteKey(None, "short!")) == (
        "a",
        "load",
    )
    # Not long enough to matter against a lighter replica.
    assert router.choose([Candidate("a", 1), Candidate("b", 0)], RouteKey(None, "short!"))[0] == "b"
    router.choose([Candidate("a", 0), Candidate("b", 5)], RouteKey("s1", "x"))
    assert router.choose([Candidate("a", 4), Candidate("b", 0)], RouteKey("s1", "y")) == (
        "a",
        "session",
    )
    # Its replica gone (dead, drained): the session goes elsewhere, and sticks there.
    assert router.choose([Candidate("b", 0)], RouteKey("s1", "z")) == ("b", "load")
    assert router.choose([Candidate("a", 0), Candidate("b", 1)], RouteKey("s1", "w")) == (
        "b",
        "session",
    )
    router.forget("b")
    assert router.report("b")["sessions"] == 0 and router.report("b")["prefix_chars"] == 0


def test_a_model_given_no_replica_is_refused_at_once(tmp_path):
    config = SupervisorConfig(command=lambda *_: ["false"], socket_dir=tmp_path, replicas={"m": 0})
    supervisor = Supervisor(config)
    try:
        with pytest.raises(EngineUnavailable, match="MLXLAB_MODEL_REPLICAS gives it none"):
            supervisor.ensure("m", str(tmp_path))
    finally:
        supervisor.shutdown()
