"""mlx-bun's contract where MLX Lab once differed: each row quotes what mlx-bun
answers, and the live server must answer the same."""

from __future__ import annotations

import pytest
from mlx_lm.utils import load_tokenizer

from inference.chat.messages import parse_messages
from inference.engine.acceleration.loader import LoadedModel
from inference.engine.prompting.prompt import PromptBuilder, PromptLimits
from inference.protocol.grammar import GrammarSpec
from inference.protocol.wire import ChatInput, GenerateCall
from tests.conftest import DEFAULT_MODEL

HI = [{"role": "user", "content": "Hi"}]


def openai_error(message: str, param: str | None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": None}}  # fmt: skip


# (path, body, the 400's body); a body that must be accepted has None.
REFUSED = [
    (
        "/v1/completions",
        {"prompt": "Hi", "max_tokens": 1, "logprobs": 5},
        openai_error("logprobs must be of type bool", "logprobs"),
    ),
    (
        "/v1/chat/completions",
        {"messages": HI, "max_tokens": 1, "logit_bias": []},
        openai_error("logit_bias must be a dict of int to float", "logit_bias"),
    ),
    (
        "/v1/chat/completions",
        {"messages": HI, "max_tokens": 1, "logprobs": True, "top_logprobs": 12},
        openai_error("top_logprobs must be at most 11", "top_logprobs"),
    ),
    # The order of the checks: messages, then logprobs, then reasoning_effort.
    (
        "/v1/chat/completions",
        {"messages": [], "logprobs": "yes", "reasoning_effort": "hihg", "temperature": -1},
        openai_error("messages required", "messages"),
    ),
    (
        "/v1/chat/completions",
        {"messages": HI, "logprobs": "yes", "reasoning_effort": "hihg", "temperature": -1},
        openai_error("logprobs must be of type bool", "logprobs"),
    ),
    (
        "/v1/chat/completions",
        {"messages": HI, "reasoning_effort": "hihg", "temperature": -1},
        openai_error(
            "reasoning_effort must be one of 'none', 'minimal', 'low', 'medium', 'high', 'xhigh'",
            "reasoning_effort",
        ),
    ),
    # A text completion's order: the prompt, then logprobs.
    (
        "/v1/completions",
        {"prompt": ["Hi"], "logprobs": "yes"},
        openai_error(
            "prompt (a non-empty string) is required "
            "(token-array prompts are not accepted, matching mlx_lm.server)",
            "prompt",
        ),
    ),
    # An integral float is an integer (3.0 is taken as 3); 3.5 is not.
    (
        "/v1/chat/completions",
        {"messages": HI, "logprobs": True, "top_logprobs": 3.5},
        openai_error("top_logprobs must be of type int", "top_logprobs"),
    ),
    # Before any model is looked up: a missing model is not the first fault.
    (
        "/v1/chat/completions",
        {"model": "no-such-model", "messages": HI, "logprobs": 1},
        openai_error("logprobs must be of type bool", "logprobs"),
    ),
    (
        "/v1/responses",
        {"input": 5},
        openai_error(
            "input must be a string or array; previous_response_id must be a string", None
        ),
    ),
    (
        "/v1/responses",
        {"input": "Hi", "previous_response_id": 5},
        openai_error(
            "input must be a string or array; previous_response_id must be a string", None
        ),
    ),
    # The shared sampling fields and the adapter reach the chat path from /v1/responses.
    (
        "/v1/responses",
        {"input": "Hi", "repetition_penalty": -1},
        openai_error("repetition_penalty must be at least 0", "repetition_penalty"),
    ),
]


@pytest.mark.parametrize(("path", "body", "expected"), REFUSED)
def test_refused_as_mlx_bun_refuses(http, path, body, expected):
    response = http.post(path, json={"model": DEFAULT_MODEL, **body})
    assert (response.status_code, response.json()) == (400, expected)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b"null"])
def test_a_responses_body_that_is_not_a_json_object(http, raw):
    response = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    assert (response.status_code, response.json()) == (
        400,
        openai_error("invalid JSON body", None),
    )


def test_an_adapter_on_responses_is_used_not_dropped(http):
    body = {"model": DEFAULT_MODEL, "input": "Hi", "adapter": "no-such-adapter"}
    response = http.post("/v1/responses", json=body)
    assert response.status_code in (400, 404), response.text
    assert "no-such-adapter" in response.json()["error"]["message"]


ACCEPTED = [
    ("/v1/chat/completions", {"messages": HI, "logprobs": True, "top_logprobs": -1}),
    ("/v1/chat/completions", {"messages": HI, "top_logprobs": -1}),
    ("/v1/chat/completions", {"messages": HI, "stop": ["", "\n\n"]}),
    ("/v1/chat/completions", {"messages": HI, "stop": ""}),
    ("/v1/completions", {"prompt": "Hi", "stop": [""], "logprobs": True}),
    # Entries that are not nonempty strings are dropped, on every surface that takes stop.
    ("/v1/chat/completions", {"messages": HI, "stop": [5, None, {"a": 1}, "", "\n\n"]}),
    ("/v1/completions", {"prompt": "Hi", "stop": [True, ["x"]]}),
    ("/v1/responses", {"input": "Hi", "stop": [5, ""]}),
    ("/v1/chat/completions", {"messages": HI, "logprobs": True, "top_logprobs": 3.0}),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]},
    ),
    ("/v1/responses", {"instructions": "Say hello."}),  # no input at all
]


@pytest.mark.parametrize(("path", "body"), ACCEPTED)
def test_accepted_as_mlx_bun_accepts(http, path, body):
    limit = "max_output_tokens" if path == "/v1/responses" else "max_tokens"
    response = http.post(path, json={"model": DEFAULT_MODEL, limit: 2, **body})
    assert response.status_code == 200, response.text


def test_an_integral_float_top_logprobs_counts_as_its_integer(client, model):
    reply = client.chat.completions.create(
        model=model, messages=HI, max_tokens=2, logprobs=True, top_logprobs=3.0
    )
    assert all(len(entry.top_logprobs) == 3 for entry in reply.choices[0].logprobs.content)


def test_top_logprobs_minus_one_means_none(http):
    body = {"model": DEFAULT_MODEL, "messages": HI, "max_tokens": 2, "logprobs": True,
            "top_logprobs": -1}  # fmt: skip
    entries = http.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"]
    assert entries["content"] and all(e["top_logprobs"] == [] for e in entries["content"])


def test_explicit_reasoning_content_wins_over_reasoning():
    messages = parse_messages(
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": "Hello",
                    "reasoning": "r",
                    "reasoning_content": "",
                },
                {"role": "assistant", "content": "Hello", "reasoning": "r"},
            ]
        }
    )
    assert messages[1]["reasoning_content"] == "" and "reasoning" not in messages[1]
    assert messages[2]["reasoning_content"] == "r"


# -- the grammar-degrade path: mlx-bun's own words, in a system message of their own ----

REGEX_WORDS = "You must respond with text matching this regular expression:\n\n(?<=a)b"


def _prompt_tokens(folder, messages: list[dict]) -> int:
    tokenizer = load_tokenizer(folder)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer.encode(text, add_special_tokens=False))


def test_an_uncompilable_grammar_is_asked_for_in_mlx_buns_words(http, model_folder):
    system = {"role": "system", "content": "Be brief."}
    body = {"model": DEFAULT_MODEL, "messages": [system, *HI], "max_tokens": 1,
            "guided_regex": "(?<=a)b"}  # fmt: skip
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and "grammar not enforced" in response.headers["warning"]
    expected = [{"role": "system", "content": REGEX_WORDS}, system, *HI]
    assert response.json()["usage"]["prompt_tokens"] == _prompt_tokens(model_folder, expected)


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
SCHEMA_WORDS = (
    "You must respond with valid JSON matching the 'place' schema. Where it is.\n\n"
    'JSON Schema:\n```json\n{\n  "type": "object",\n  "properties": {\n    "city": {\n'
    '      "type": "string"\n    }\n  }\n}\n```\n\n'
    "Respond with only the JSON object, no additional text or explanation."
)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {
                "name": "place", "description": "Where it is.", "schema": SCHEMA}}},
            SCHEMA_WORDS,
        ),
        (
            {"response_format": {"type": "json_object"}},
            "You must respond with valid JSON only. "
            "Do not include any explanation or text outside the JSON object.",
        ),
        ({"guided_choice": ["yes", "no"]},
         'You must respond with exactly one of these choices:\n\n"yes"\n"no"'),
        ({"guided_grammar": 'root ::= "a"'},
         'You must respond with text matching this grammar:\n\nroot ::= "a"'),
    ],
)  # fmt: skip
def test_with_grammar_off_every_constraint_is_asked_for(model_folder, fields, words):
    """MLXLAB_GRAMMAR=0, on the real tokenizer: nothing compiles, the prompt asks."""
    from inference.api.openai_request import parse_chat_completion
    from inference.chat.plan import chat_input

    chat = chat_input(parse_chat_completion({"messages": HI, **fields}))
    builder = PromptBuilder(
        LoadedModel(None, load_tokenizer(model_folder), 8192, 49152, model_folder),
        limits=PromptLimits(grammar_enabled=False),
    )
    prepared = builder.build(GenerateCall(chat=chat, max_tokens=1))
    assert prepared.warning == (
        "grammar not enforced: grammar compilation disabled by MLXLAB_GRAMMAR=0 "
        "- falling back to prompt injection"
    )
    assert prepared.request.grammar is None
    expected = [{"role": "system", "content": words}, *HI]
    assert prepared.prompt_tokens == _prompt_tokens(model_folder, expected)


def test_a_constraint_without_words_of_its_own_gets_the_generic_ones(model_folder):
    chat = ChatInput(messages=HI, structured=GrammarSpec("regex", "a+"))
    builder = PromptBuilder(
        LoadedModel(None, load_tokenizer(model_folder), 8192, 49152, model_folder),
        limits=PromptLimits(grammar_enabled=False),
    )
    prepared = builder.build(GenerateCall(chat=chat, max_tokens=1))
    generic = [{"role": "system", "content": "Follow the requested output constraint exactly."}]
    assert prepared.prompt_tokens == _prompt_tokens(model_folder, [*generic, *HI])
