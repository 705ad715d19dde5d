"""A draft model's worker dying, on the model-workers fault server (test_model_workers.py):
the target's worker dying ends a drafted stream as the model-workers contract says (and a
retry drafts again in its successor); the draft model's own worker dying (when it is
served as a model too) touches no drafted stream; and the draft's companion worker dying
mid-stream turns drafting off for that stream, which ends as it would undrafted, while the
companion restarts and drafts for the next requests."""

from __future__ import annotations

import os
import signal

import openai

from tests.api.test_model_workers import LONG, SECOND, STREAM_MESSAGE, lab  # noqa: F401
from tests.api.worker_events import EventReader
from tests.conftest import DEFAULT_MODEL

DRAFTED = {"draft_model": SECOND}  # a copy of the default model: the same vocabulary


def _drafted_stream(lab, max_tokens: int):  # noqa: F811 (the fixture's name)
    return lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=LONG, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body=DRAFTED,
    )  # fmt: skip


def test_the_worker_holding_the_draft_killed_mid_stream(lab):  # noqa: F811
    before = lab.ready(DEFAULT_MODEL)
    seen, ending = 0, None
    try:
        for _ in _drafted_stream(lab, 300):
            seen += 1
            if seen == 4:
                os.kill(before["pid"], signal.SIGKILL)
    except openai.APIError as error:
        ending = error
    expected = STREAM_MESSAGE.format("SIGKILL")
    assert isinstance(ending, openai.APIError) and ending.message == expected, ending
    assert ending.body == {"message": expected, "type": "engine_unavailable"}
    assert lab.engine()["last_exit"] == {"code": None, "signal": "SIGKILL"}

    # A retry drafts again, in the successor, which loads the draft anew.
    chunks = list(_drafted_stream(lab, 12))
    usage = chunks[-1].usage
    assert usage.completion_tokens == 12
    assert usage.completion_tokens_details.accepted_prediction_tokens > 0
    assert lab.worker(DEFAULT_MODEL)["pid"] != before["pid"]


def test_the_draft_model_s_own_worker_dying_leaves_drafted_streams_alone(lab):  # noqa: F811
    plain = lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=LONG, max_tokens=24, temperature=0
    )
    own = lab.ready(SECOND)  # the draft model served in its own right too
    text, usage = "", None
    for seen, chunk in enumerate(_drafted_stream(lab, 24), start=1):
        if seen == 2:
            os.kill(own["pid"], signal.SIGKILL)
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    assert text == plain.choices[0].message.content
    assert usage.completion_tokens_details.accepted_prediction_tokens > 0
    lab.ready(SECOND)


TOKENS = 120  # long enough that the companion dies while the target still generates


def _text_and_usage(stream, on_chunk=lambda seen: None) -> tuple[str, object]:
    text, usage = "", None
    for seen, chunk in enumerate(stream, start=1):
        on_chunk(seen)
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    return text, usage


def test_a_companion_killed_mid_stream_leaves_the_stream_whole(lab):  # noqa: F811
    plain = lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=LONG, max_tokens=TOKENS, temperature=0
    )
    _text_and_usage(_drafted_stream(lab, 2))  # the companion starts (and is waited for)
    companion = lab.companion()
    primary = lab.worker(DEFAULT_MODEL)
    assert companion["model"] == SECOND and companion["primary"] == primary["id"]
    assert companion["state"] == "ready" and companion["pid"] != primary["pid"]
    reader = EventReader(lab.server)
    try:
        kill = lambda seen: seen == 2 and os.kill(companion["pid"], signal.SIGKILL)  # noqa: E731
        text, usage = _text_and_usage(_drafted_stream(lab, TOKENS), kill)
        assert text == plain.choices[0].message.content
        assert usage.completion_tokens == plain.usage.completion_tokens
        exit_ = reader.wait_for("exit", SECOND, worker=companion["id"])
        assert exit_[2]["detail"]["signal"] == "SIGKILL" and not exit_[2]["detail"]["expected"]
        reader.wait_for("restarting", SECOND, after=exit_[0], worker=companion["id"])
        reader.wait_for("ready", SECOND, after=exit_[0], worker=companion["id"])
    finally:
        reader.close()
    again = lab.companion()
    assert again["id"] == companion["id"] and again["restarts"] == 1
    assert again["pid"] != companion["pid"] and lab.worker(DEFAULT_MODEL)["pid"] == primary["pid"]
    # The next drafted request drafts again, from the restarted companion, all along: more
    # than the stream whose companion died early on.
    text, again_usage = _text_and_usage(_drafted_stream(lab, TOKENS))
    assert text == plain.choices[0].message.content
    details = usage.completion_tokens_details  # None when no draft was kept at all
    drafted = details.accepted_prediction_tokens if details is not None else 0
    assert again_usage.completion_tokens_details.accepted_prediction_tokens > drafted
