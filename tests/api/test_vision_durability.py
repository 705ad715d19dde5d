"""The worker failure contract and resumed retries on an image row: the tiny Qwen2.5-VL's
worker SIGKILLed under a streamed image request, on a server of this module's own (its
kill must not disturb the session's shared server, as in test_model_workers.py).

A resumed image row prefills its prompt's embeddings (the image's features at its
placeholders, mRoPE positions) and then the replayed tokens after it, in one pass
(media/rows.py row_media); its checkpoint is keyed by the image's hash besides the
prompt's token ids, whose placeholders do not say which image they stand for.
"""

from __future__ import annotations

import os
import signal

import openai
import pytest

from tests.api.test_durability import Streamed, checkpoint_files_settled
from tests.api.test_model_workers import STREAM_MESSAGE, Lab
from tests.api.test_vision import data_url, image_message
from tests.conftest import _manage, server_home, start_daphne
from tests.vision_models import png

MODEL = "tiny-qwen2-5-vl"
# The tiny model's end tokens (<|endoftext|>, <|im_end|>) banned: every answer runs to
# max_tokens, long enough for a kill to land mid-stream.
LONG = {"max_tokens": 300, "temperature": 0.8, "logit_bias": {"0": -100, "2": -100}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, model_folder, vision_folder, redis_url):
    home = tmp_path_factory.mktemp("vision-durability")
    env = server_home(home, model_folder, MAX_LOADED_MODELS="2", ENGINE_WAIT_SECONDS="60")
    _manage(env, "add_model", str(vision_folder), "--name", MODEL)
    server = start_daphne(home, env, "vision-durability-daphne")
    try:
        yield Lab(server)
    finally:
        server.stop()


def stream(lab: Lab, messages: list[dict], *, kill_at: int | None = None, **fields) -> Streamed:
    """A streamed chat completion; the model's worker SIGKILLed at the `kill_at`th chunk."""
    pid = lab.ready(MODEL)["pid"] if kill_at else None
    raw = lab.openai.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True},
        **{**LONG, **fields},
    )  # fmt: skip
    out = Streamed(resumed_from=raw.headers.get("x-resumed-from"))
    try:
        for chunk in raw.parse():
            out.usage = chunk.usage or out.usage
            if chunk.choices and chunk.choices[0].delta.content:
                out.text += chunk.choices[0].delta.content
                out.chunks += 1
                if out.chunks == kill_at:
                    os.kill(pid, signal.SIGKILL)
    except openai.APIError as error:  # the protocol's error frame
        out.error = error
    return out


def test_a_killed_image_stream_ends_in_the_error_frame_and_its_retry_resumes(lab):
    messages = [image_message(data_url(png(112, 84, seed=31)))]
    whole = stream(lab, messages, seed=7)
    assert whole.error is None and whole.usage.completion_tokens == LONG["max_tokens"]

    killed = stream(lab, messages, seed=7, kill_at=12)
    assert isinstance(killed.error, openai.APIError), killed
    expected = STREAM_MESSAGE.format("SIGKILL")
    assert killed.error.body == {"message": expected, "type": "engine_unavailable"}
    assert whole.text.startswith(killed.text)

    # The same words and seed about another picture of the same size: the same prompt
    # token ids, but the checkpoint's key holds the image's hash: nothing is resumed.
    other = stream(lab, [image_message(data_url(png(112, 84, seed=32)))], seed=7)
    assert other.resumed_from is None and other.error is None
    assert "resumed_from" not in other.usage.model_extra and other.text != whole.text

    # The identical retry, not streamed, goes on from the last periodic checkpoint (every
    # 8 tokens): the image's prompt prefilled again, the replayed tokens after it.
    raw = lab.openai.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, seed=7, **LONG
    )
    retry = raw.parse()
    resumed = int(raw.headers["x-resumed-from"])
    assert resumed >= 8 and resumed % 8 == 0
    assert retry.usage.model_extra["resumed_from"] == resumed
    assert retry.choices[0].message.content == whole.text
    assert checkpoint_files_settled(lab) == []
