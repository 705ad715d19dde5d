"""A resumed stream's events past what the client was sent (inference/stream_resume.py)."""

from __future__ import annotations

import asyncio

import pytest

from inference.protocol.events import Finished, ReasoningDelta, TextDelta, ToolCall
from inference.stream_resume import Diverged, Sent, beyond

END = Finished("stop", 5, 9)
CALL = ToolCall("call-1", "get_time", "{}")


def rest(sent_events: list, new_events: list) -> list:
    sent = Sent()
    for event in sent_events:
        sent.record(event)

    async def source():
        for event in new_events:
            yield event

    async def read():
        return [event async for event in beyond(source(), sent)]

    return asyncio.run(read())


def test_what_was_sent_is_cut_off_mid_delta():
    sent = [ReasoningDelta("Let me"), TextDelta("The answer "), TextDelta("is")]
    new = [ReasoningDelta("Let me think."), TextDelta("The answer is 4"), TextDelta("2."), END]
    assert rest(sent, new) == [ReasoningDelta(" think."), TextDelta(" 4"), TextDelta("2."), END]


def test_tool_calls_already_sent_are_not_sent_again():
    assert rest([TextDelta("Checking."), CALL], [TextDelta("Checking."), CALL, END]) == [END]


def test_other_text_than_was_sent_ends_the_stream():
    with pytest.raises(Diverged):
        rest([TextDelta("The answer is 42")], [TextDelta("The answer is 41"), END])


@pytest.mark.parametrize(
    "new",
    [
        [TextDelta("The ans"), END],  # ended before what was sent
        [TextDelta("The answer"), CALL, END],  # a call where the text went on
        [TextDelta("Hi"), END],  # the answer before the reasoning that was sent
    ],
)
def test_a_new_attempt_that_moves_on_before_what_was_sent_ends_the_stream(new):
    sent = [ReasoningDelta("Hm.")] if new[0].text == "Hi" else [TextDelta("The answer is")]
    with pytest.raises(Diverged):
        rest(sent, new)
