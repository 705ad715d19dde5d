from inference.engine.loop.stop import StopMatcher


def feed_all(matcher: StopMatcher, pieces: list[str]) -> str:
    return "".join(matcher.feed(piece) for piece in pieces)


def test_stop_spanning_pieces_is_never_released():
    matcher = StopMatcher(("END",))
    out = feed_all(matcher, ["hello E", "N", "D tail"])
    assert out == "hello "
    assert matcher.matched == "END"


def test_partial_prefix_is_held_then_released_when_it_diverges():
    matcher = StopMatcher(("END",))
    assert matcher.feed("abc EN") == "abc "
    assert matcher.feed("X") == "ENX"
    assert matcher.matched is None


def test_earliest_of_several_stops_wins():
    matcher = StopMatcher(("world", "lo w"))
    assert feed_all(matcher, ["hello world"]) == "hel"
    assert matcher.matched == "lo w"


def test_flush_releases_held_text_without_match():
    matcher = StopMatcher(("###",))
    assert matcher.feed("a#") == "a"
    assert matcher.flush() == "#"


def test_nothing_after_a_match():
    matcher = StopMatcher(("x",))
    matcher.feed("axb")
    assert matcher.feed("more") == ""


def test_no_stops_passes_everything():
    matcher = StopMatcher(())
    assert matcher.feed("abc") == "abc"
