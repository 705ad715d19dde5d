"""Issue 50 item 7, in the parsers: stop entries that are not nonempty strings dropped on
every surface, an integral float top_logprobs, a text completion's prompt checked first.
(test_mlx_bun_contract.py asks the live server the same; one live SDK call here.)"""

from __future__ import annotations

import anthropic
import pytest

from inference.api.anthropic_request import parse_messages_request
from inference.api.openai_request import parse_chat_completion, parse_completion
from inference.api.responses_request import parse_responses_call, responses_chat_call
from inference.chat.fields import check_logprobs
from inference.errors import ApiError

HI = [{"role": "user", "content": "Hi"}]
SURFACES = {
    "chat": lambda stop: parse_chat_completion({"messages": HI, "stop": stop}),
    "completions": lambda stop: parse_completion({"prompt": "Hi", "stop": stop}),
    "messages": lambda stop: parse_messages_request(
        {"model": "m", "max_tokens": 5, "messages": HI, "stop_sequences": stop}
    ),
    "responses": lambda stop: responses_chat_call(
        parse_responses_call({"input": "Hi", "stop": stop}), []
    ),
}


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_drops_stop_entries_that_are_not_nonempty_strings(surface):
    assert SURFACES[surface]([5, None, "", {"a": 1}, "\n\n"]).stop == ("\n\n",)
    assert SURFACES[surface]([True, ""]).stop == ()


@pytest.mark.parametrize("surface", SURFACES)
def test_a_stop_that_is_no_list_is_still_refused(surface):
    with pytest.raises(ApiError) as refused:
        SURFACES[surface](5 if surface != "messages" else "Paris")
    assert refused.value.param in ("stop", "stop_sequences")


@pytest.mark.parametrize(
    ("sent", "taken"), [(3.0, 3), (3, 3), (-1.0, 0), (0.0, 0), (11.0, 11)]
)  # fmt: skip
def test_an_integral_float_top_logprobs_is_its_integer(sent, taken):
    assert check_logprobs({"logprobs": True, "top_logprobs": sent}) == (True, taken)


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (3.5, "top_logprobs must be of type int"),
        (True, "top_logprobs must be of type int"),
        ("3", "top_logprobs must be of type int"),
        (12.0, "top_logprobs must be at most 11"),
        (-2.0, "top_logprobs must be at least 0"),
    ],
)
def test_other_top_logprobs_are_refused(sent, message):
    with pytest.raises(ApiError) as refused:
        check_logprobs({"logprobs": True, "top_logprobs": sent})
    assert refused.value.message == message


def test_a_text_completion_checks_its_prompt_before_logprobs():
    with pytest.raises(ApiError) as refused:
        parse_completion({"prompt": "", "logprobs": "yes", "top_logprobs": 99})
    assert refused.value.param == "prompt"
    with pytest.raises(ApiError) as refused:
        parse_completion({"prompt": "Hi", "logprobs": "yes", "temperature": -1})
    assert refused.value.param == "logprobs"


def test_stop_sequences_that_are_not_nonempty_strings_are_dropped_end_to_end(lab_server, model):
    """Through Anthropic's SDK: the rest still stops the reply, as alone."""
    claude = anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)
    paris = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    greedy = {"model": model, "messages": paris, "max_tokens": 16, "extra_body": {"temperature": 0}}
    alone = claude.messages.create(**greedy, stop_sequences=["Paris"])
    dropped = claude.messages.create(**greedy, stop_sequences=[7, "", None, "Paris"])
    assert (dropped.stop_reason, dropped.stop_sequence) == ("stop_sequence", "Paris")
    assert dropped.content[0].text == alone.content[0].text
