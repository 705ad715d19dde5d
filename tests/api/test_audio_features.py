"""What a text or an image row gets, an audio row gets too: seeds, logprobs, stop strings,
structured output, forced tool calls and a quantized KV request's 400, through the
`openai` SDK on the session's live server and the tiny Gemma 3n's worker
(tests/audio_models.py): the checks of test_vision_features.py, on a message whose media
is a clip (test_audio.py's).

Gemma 3n's language model makes its own caches (sliding windows, its last layers reading
earlier layers' KV), and its audio prompt (188 soft tokens) runs past its window (32).
"""

from __future__ import annotations

import openai
import pytest

from tests.api.test_audio import audio_message
from tests.api.test_vision_features import (
    LOOK,
    ask_with,
    assert_forced_call,
    assert_logprobs,
    assert_seed_fixes_text,
    assert_stop_cuts,
    assert_structured,
)
from tests.audio_models import wav

CLIP = audio_message(wav(0.5, seed=41))
# A tool_choice naming the function, where the image tests ask for any ("required").
DESCRIBE = {"type": "function", "function": {"name": "describe"}}


def test_a_seed_fixes_a_sampled_audio_rows_text(client, gemma3n_model):
    assert_seed_fixes_text(client, gemma3n_model, CLIP)


def test_an_audio_row_gives_logprobs_and_greedy_picks_the_top_one(client, gemma3n_model):
    assert_logprobs(client, gemma3n_model, CLIP)


def test_a_stop_string_cuts_an_audio_rows_output(client, gemma3n_model):
    assert_stop_cuts(client, gemma3n_model, CLIP)


def test_structured_output_on_an_audio_row_matches_its_schema(client, gemma3n_model):
    # One key (the tool's parameters), whose JSON fits in 16 tokens; the image tests' has two.
    assert_structured(client, gemma3n_model, CLIP, LOOK["function"]["parameters"], max_tokens=16)


def test_a_tool_call_forced_by_name_on_an_audio_row_has_valid_arguments(client, gemma3n_model):
    # 26 tokens: a media row is not fast-forwarded through a call's fixed text (fill.py
    # refuses media), and the random model spells it in more tokens than the tokenizer does.
    assert_forced_call(client, gemma3n_model, CLIP, DESCRIBE, max_tokens=32)


def test_a_quantized_kv_cache_asked_on_an_audio_row_is_a_400(client, gemma3n_model):
    """Gemma 3n's sliding-window caches have no quantized form (mlx-lm's rotating cache):
    the request is refused when it is built, as a text row's would be, and the worker
    answers the next one."""
    quantized = {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 0}
    with pytest.raises(openai.BadRequestError) as caught:
        ask_with(client, gemma3n_model, CLIP, extra_body=quantized)
    body = caught.value.body
    assert (body["message"], body["param"]) == (
        "this model's KV cache cannot be quantized",
        "kv_bits",
    )
    assert ask_with(client, gemma3n_model, CLIP).choices[0].finish_reason == "length"
