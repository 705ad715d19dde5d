"""A stream's frames as serve.py writes them: what a reader fell behind on goes out in one
body chunk, byte for byte the frames it would have written one by one."""

from __future__ import annotations

import asyncio

from inference import serve
from inference.api.openai_render import ChatRenderer
from inference.api.surfaces import OPENAI
from inference.protocol.events import Finished, TextDelta
from inference.workers.streams import STOPPED, Deliveries, RequestStream

WORDS = ["The", " sky", " is", " blue", "."]


def chunks_written(arrivals: list[list], *, stopped: bool = False) -> list[bytes]:
    """The body chunks `_frames` yields when the events come in these groups (each group
    queued at once, as one worker step's deliveries are)."""

    async def run() -> list[bytes]:
        stream = RequestStream(asyncio.get_running_loop())
        renderer = ChatRenderer("m", logprobs=False)
        frames = serve._frames(None, stream, renderer, OPENAI, None)
        written = [await anext(frames)]  # the role chunk, before any token
        for group in arrivals:
            step = Deliveries()  # as the supervisor hands over one read from the worker
            for event in group:
                stream.deliver_later("event", event, step)
            if stopped and group is arrivals[-1]:
                stream.deliver_later(STOPPED, None, step)
            step.send()
            written.append(await anext(frames))
        async for rest in frames:
            written.append(rest)
        return written

    return asyncio.run(run())


def frames_of(chunks: list[bytes]) -> list[bytes]:
    """Each SSE frame's data, the response's id and time left out."""
    frames = b"".join(chunks).split(b"\n\n")
    return [frame.split(b'"model"')[-1] for frame in frames]


def test_events_queued_together_go_out_as_one_chunk():
    end = Finished("stop", 4, len(WORDS))
    one_by_one = chunks_written([[TextDelta(word)] for word in WORDS] + [[end]])
    caught_up = chunks_written([[TextDelta(word) for word in WORDS] + [end]])
    assert len(one_by_one) == 1 + len(WORDS) + 1  # the role; each word; the end, [DONE]
    assert len(caught_up) == 2
    assert frames_of(caught_up) == frames_of(one_by_one)
    assert one_by_one[-1].endswith(b"data: [DONE]\n\n") and b'"stop"' in one_by_one[-1]


def test_a_worker_that_dies_behind_the_reader_still_gets_what_it_sent_out_first():
    written = chunks_written([[TextDelta(word) for word in WORDS[:3]]], stopped=True)
    assert len(written) == 2
    body = written[1]
    for word in WORDS[:3]:
        assert f'"content":"{word}"'.encode() in body
    assert b"the engine worker stopped while streaming" in body
    assert body.index(b'"content":" is"') < body.index(b"engine worker stopped")
