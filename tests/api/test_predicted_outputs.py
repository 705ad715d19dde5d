"""draft_model, num_draft_tokens and OpenAI's `prediction` on every surface; the accepted and
rejected prediction tokens in usage, streamed too; the acceptance in /stats."""

from __future__ import annotations

import pytest

from inference.api.openai_request import parse_chat_completion
from inference.errors import ApiError
from tests.api.parse_surfaces import HI, SURFACES

NOT_A_NAME = "draft_model must be 'ngram', 'none' or a model's name"
FAULTS = [
    ({"draft_model": 3}, "draft_model", "draft_model must be of type str"),
    ({"draft_model": ""}, "draft_model", NOT_A_NAME),
    ({"num_draft_tokens": 0}, "num_draft_tokens", "num_draft_tokens must be at least 1"),
    ({"num_draft_tokens": 65}, "num_draft_tokens", "num_draft_tokens must be at most 64"),
    ({"num_draft_tokens": "4"}, "num_draft_tokens", "num_draft_tokens must be of type int"),
]
PREDICTION_USAGE = 'prediction must be {"type": "content", "content": <string or text parts>}'


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_reads_the_draft_fields(surface):
    call = SURFACES[surface]({"draft_model": "ngram", "num_draft_tokens": 5})
    assert call.draft == {"draft_model": "ngram", "num_draft_tokens": 5}
    assert SURFACES[surface]({"draft_model": "small"}).draft == {"draft_model": "small"}
    assert SURFACES[surface]({}).draft == {}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("body", "param", "message"), FAULTS)
def test_every_surface_refuses_bad_draft_fields_alike(surface, body, param, message):
    with pytest.raises(ApiError) as refused:
        SURFACES[surface](body)
    assert (refused.value.message, refused.value.param) == (message, param)


@pytest.mark.parametrize(
    "prediction",
    [
        {"type": "content", "content": "def f(): pass"},
        {"type": "content", "content": [{"type": "text", "text": "def f("}, {"type": "text", "text": "): pass"}]},
    ],
)  # fmt: skip
def test_chat_reads_a_prediction_as_text(prediction):
    call = parse_chat_completion({"messages": HI, "prediction": prediction})
    assert call.draft == {"prediction": "def f(): pass"}


@pytest.mark.parametrize(
    "prediction",
    ["text", {"type": "text", "content": "x"}, {"type": "content"}, {"type": "content", "content": [{"type": "image"}]}],
)  # fmt: skip
def test_a_bad_prediction_is_refused(prediction):
    with pytest.raises(ApiError) as refused:
        parse_chat_completion({"messages": HI, "prediction": prediction})
    assert (refused.value.message, refused.value.param) == (PREDICTION_USAGE, "prediction")


# -- on the live server ------------------------------------------------------------------

CODE = '''def greet(name):
    """Say hello to someone."""
    message = "Hello, " + name + "!"
    print(message)
    return message
'''
ASK = [{"role": "user", "content": "Add a type hint to this function:\n\n" + CODE}]


def test_predicted_outputs_keep_the_reply_and_report_their_tokens(client, model):
    common = {"model": model, "messages": ASK, "max_tokens": 60, "temperature": 0}
    plain = client.chat.completions.create(**common)
    assert plain.usage.completion_tokens_details is None  # no drafting asked
    predicted = client.chat.completions.create(
        **common, extra_body={"prediction": {"type": "content", "content": CODE}}
    )
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0
    assert details.accepted_prediction_tokens <= predicted.usage.completion_tokens
    assert details.rejected_prediction_tokens >= 0
    ngram = client.chat.completions.create(
        **common, extra_body={"draft_model": "ngram", "num_draft_tokens": 4}
    )
    assert ngram.choices[0].message.content == plain.choices[0].message.content
    assert ngram.usage.completion_tokens_details.accepted_prediction_tokens >= 0


def test_streamed_usage_reports_the_prediction_tokens(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=ASK,
        max_tokens=40,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"prediction": {"type": "content", "content": CODE}},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    details = usage.completion_tokens_details
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens > 0
    assert details.accepted_prediction_tokens <= usage.completion_tokens


def test_the_completions_surface_drafts_by_prompt_lookup(http, model, staff_http):
    body = {"model": model, "prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 24}
    plain = http.post("/v1/completions", json={**body, "temperature": 0}).json()
    drafted = http.post(
        "/v1/completions", json={**body, "temperature": 0, "draft_model": "ngram"}
    ).json()
    assert drafted["choices"][0]["text"] == plain["choices"][0]["text"]
    details = drafted["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0
    stats = staff_http.get("/stats").json()["models"][model]["speculative"]
    assert stats["drafted_tokens"] >= stats["accepted_tokens"] > 0
    assert 0 < stats["acceptance_rate"] <= 1


def test_bad_draft_fields_are_400s_in_each_protocols_shape(http, model):
    bad = {"num_draft_tokens": 0}
    chat = http.post("/v1/chat/completions", json={"model": model, "messages": HI, **bad})
    assert chat.status_code == 400
    assert chat.json()["error"]["param"] == "num_draft_tokens"
    prediction = http.post(
        "/v1/chat/completions",
        json={"model": model, "messages": HI, "prediction": {"type": "code"}},
    )
    assert prediction.status_code == 400
    assert prediction.json()["error"]["message"] == PREDICTION_USAGE
    messages = http.post(
        "/v1/messages", json={"model": model, "max_tokens": 4, "messages": HI, **bad}
    )
    assert messages.status_code == 400
    assert messages.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "num_draft_tokens must be at least 1",
        },
    }
    responses = http.post(
        "/v1/responses", json={"model": model, "input": "Hi", "draft_model": "tiny"}
    )
    assert responses.status_code == 400
    assert responses.json()["error"]["param"] == "draft_model"


def test_a_schema_s_forced_tokens_are_counted_as_fast_forwarded(client, http, model, staff_http):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }
    common = {
        "model": model,
        "messages": [{"role": "user", "content": "Name a city and its country as JSON."}],
        "max_tokens": 40,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    }
    forwarded = client.chat.completions.create(**common)
    reference = client.chat.completions.create(**common, logprobs=True)  # never fast-forwarded
    assert forwarded.choices[0].message.content == reference.choices[0].message.content
    assert forwarded.usage.completion_tokens_details.fast_forwarded_tokens > 0
    speculative = staff_http.get("/stats").json()["models"][model]["speculative"]
    assert speculative["fast_forwarded_tokens"] >= (
        forwarded.usage.completion_tokens_details.fast_forwarded_tokens
    )
    assert reference.usage.completion_tokens_details is None


def test_a_forced_tool_call_s_fixed_span_is_fast_forwarded(client, model):
    # Once tool_choice names the function, '{"name": "get_weather", "arguments": {"city": '
    # is the only way on: those tokens come in one verifying pass, the call unchanged.
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    common = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "max_tokens": 40,
        "temperature": 0,
        "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    forwarded = client.chat.completions.create(**common)
    reference = client.chat.completions.create(**common, logprobs=True)  # never fast-forwarded
    call, expected = (
        forwarded.choices[0].message.tool_calls,
        reference.choices[0].message.tool_calls,
    )
    assert [(c.function.name, c.function.arguments) for c in call] == [
        (c.function.name, c.function.arguments) for c in expected
    ]
    assert call[0].function.name == "get_weather"
    assert forwarded.usage.completion_tokens_details.fast_forwarded_tokens >= 8
    assert reference.usage.completion_tokens_details is None
