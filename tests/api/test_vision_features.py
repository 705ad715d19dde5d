"""What a text row gets, an image row gets too: seeds, logprobs, stop, structured output,
forced tool calls, quantized KV and the Responses API's input_file, through the `openai`
SDK on the session's live server and the tiny Qwen2.5-VL's worker (tests/vision_models.py),
some on the tiny SmolVLM's too (plain RoPE, tiled images).

Speculative decoding is the exception: a vision model never drafts (the verifying pass
carries no image row's positions), and a request that asks for it is answered undrafted.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.api.test_vision import QUESTION, data_url, image_message
from tests.vision_models import png

IMAGE = data_url(png(112, 84, seed=21))
# SmolVLM's picture: a wide one, of four tiles and a global view (a 4:3 one has twelve).
WIDE = data_url(png(112, 28, seed=22))


def ask(client, model: str, image: str = IMAGE, **options):
    return ask_with(client, model, image_message(image), **options)


def ask_with(client, model: str, message: dict, **options):
    """A chat completion of one user `message` (its media and words), greedy and short
    unless `options` say otherwise."""
    fields = {"max_tokens": 8, "temperature": 0, **options}
    return client.chat.completions.create(model=model, messages=[message], **fields)


# The checks below take the row's message: test_audio_features.py runs them on audio rows.


def assert_seed_fixes_text(client, model: str, message: dict) -> None:
    sampled = {"temperature": 1.0, "max_tokens": 12}
    texts = [ask_with(client, model, message, seed=seed, **sampled).choices[0].message.content
             for seed in (5, 5, 6)]  # fmt: skip
    assert texts[0] == texts[1] != texts[2]


def assert_logprobs(client, model: str, message: dict) -> None:
    answer = ask_with(client, model, message, logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens == 8
    for chosen in content:
        assert len(chosen.top_logprobs) == 3
        assert chosen.token == chosen.top_logprobs[0].token
        assert chosen.logprob == chosen.top_logprobs[0].logprob <= 0
    assert "".join(chosen.token for chosen in content) == answer.choices[0].message.content


def assert_stop_cuts(client, model: str, message: dict) -> None:
    whole = ask_with(client, model, message, max_tokens=12).choices[0].message.content
    # A stop string from the middle of the greedy text: the answer ends just before it.
    stop = whole[len(whole) // 2 :][:3]
    assert stop.strip(), whole
    cut = ask_with(client, model, message, max_tokens=12, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.message.content == whole[: whole.index(stop)]


def test_a_seed_fixes_a_sampled_image_rows_text(client, vision_model):
    assert_seed_fixes_text(client, vision_model, image_message(IMAGE))


def test_an_image_row_gives_logprobs_and_greedy_picks_the_top_one(client, vision_model):
    assert_logprobs(client, vision_model, image_message(IMAGE))


def test_a_stop_string_cuts_an_image_rows_output(client, vision_model):
    assert_stop_cuts(client, vision_model, image_message(IMAGE))


SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green", "blue"]}, "bright": {"type": "boolean"}},
    "required": ["colour", "bright"],
    "additionalProperties": False,
}


def assert_structured(
    client, model: str, message: dict, schema: dict = SCHEMA, max_tokens: int = 40
) -> None:
    answer = ask_with(
        client, model, message, max_tokens=max_tokens,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "picture", "schema": schema, "strict": True}},
    )  # fmt: skip
    assert answer.choices[0].finish_reason == "stop", answer.choices[0]
    jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


def test_structured_output_on_an_image_row_matches_its_schema(client, vision_model):
    assert_structured(client, vision_model, image_message(IMAGE))


LOOK = {
    "type": "function",
    "function": {
        "name": "describe",
        "description": "Describe a picture",
        "parameters": {
            "type": "object",
            "properties": {"colour": {"enum": ["red", "green", "blue"]}},
            "required": ["colour"],
            "additionalProperties": False,
        },
    },
}


def assert_forced_call(client, model: str, message: dict, choice="required", **options) -> None:
    answer = ask_with(client, model, message, tools=[LOOK], tool_choice=choice, **options)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "describe"
    assert json.loads(call.function.arguments)["colour"] in ("red", "green", "blue")


def test_a_forced_tool_call_on_an_image_row_parses_into_tool_calls(client, vision_model):
    assert_forced_call(client, vision_model, image_message(IMAGE), max_tokens=60)


@pytest.mark.parametrize("method", ["prompt-lookup", "prediction"])
def test_speculative_decoding_asked_on_an_image_row_answers_undrafted(client, vision_model, method):
    plain = ask(client, vision_model, max_tokens=16)
    text = plain.choices[0].message.content
    # The answer itself as its prediction: a drafting model would keep every drafted token.
    drafting = (
        {"extra_body": {"draft_model": "ngram"}}
        if method == "prompt-lookup"
        else {"prediction": {"type": "content", "content": text}}
    )
    drafted = ask(client, vision_model, max_tokens=16, **drafting)
    assert drafted.choices[0].message.content == text
    details = drafted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens == details.rejected_prediction_tokens == 0
    assert details.model_extra.get("fast_forwarded_tokens", 0) == 0


def assert_quantized_kv(client, model: str, message: dict) -> None:
    quantized = {"kv_bits": 8, "kv_group_size": 32, "quantized_kv_start": 0}
    first, second = (ask_with(client, model, message, extra_body=quantized) for _ in range(2))
    assert first.choices[0].message.content == second.choices[0].message.content
    # Its media's prefill is found again in the 8-bit lane's cache.
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens - 1
    # A group size its heads (32 wide) cannot hold is a 400, read from the media model's
    # language model as from a text model.
    with pytest.raises(openai.BadRequestError) as caught:
        ask_with(client, model, message, extra_body={**quantized, "kv_group_size": 64})
    assert "must divide this model's head dimension (32)" in caught.value.body["message"]


def test_an_image_row_on_a_quantized_kv_cache_is_answered_and_cached(client, vision_model):
    assert_quantized_kv(client, vision_model, image_message(IMAGE))


def test_the_responses_api_takes_an_image_as_an_input_file(client, vision_model):
    same = ask(client, vision_model, max_tokens=4)
    content = [{"type": "input_text", "text": QUESTION},
               {"type": "input_file", "file_data": IMAGE, "filename": "picture.png"}]  # fmt: skip
    answer = client.responses.create(
        model=vision_model, input=[{"role": "user", "content": content}],
        max_output_tokens=4, temperature=0,
    )  # fmt: skip
    assert answer.usage.input_tokens == same.usage.prompt_tokens
    assert answer.output_text == same.choices[0].message.content


@pytest.mark.parametrize(
    "part, message",
    [
        ({"file_id": "file-abc123"}, "file ids and file URLs are not supported"),
        ({"file_data": data_url(b"%PDF-1.4", "application/pdf")}, "'application/pdf'"),
    ],
    ids=["file-id", "pdf"],
)
def test_an_input_file_that_is_no_image_is_a_400(client, vision_model, part, message):
    content = [{"type": "input_file", **part}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=vision_model, input=[{"role": "user", "content": content}])
    assert message in caught.value.body["message"]


def test_a_second_family_keeps_a_seed_and_a_schema_on_an_image_row(client, smolvlm_model):
    """SmolVLM (plain RoPE, tiled images), in one test: the server holds one vision model
    beside the default one, and each switch reloads a worker."""
    assert_seed_fixes_text(client, smolvlm_model, image_message(WIDE))
    assert_structured(client, smolvlm_model, image_message(WIDE))
