"""Generated replies keep their own token ids in later prompts (prompting/token_history.py),
on the default model's real tokenizer and engine: a reply spelled in pieces BPE would
merge is found in the next turn's rendered prompt, its stretch takes the generated ids, and
the prompt cache then hits past it."""

from __future__ import annotations

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.prompting.prompt import PromptBuilder
from inference.engine.prompting.token_history import TokenHistory, history_for
from inference.protocol.sampling import SamplingParams
from inference.protocol.wire import ChatInput, GenerateCall
from tests.engine.helpers import generate

REPLY = "Sure, the answer is forty-two."


@pytest.fixture(scope="module")
def tokenizer(model_folder):
    return load_tokenizer(model_folder)


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def spelled(tokenizer, text: str) -> list[int]:
    """`text` one character a token: ids a model may sample, BPE never gives."""
    ids = [token for char in text for token in encode(tokenizer, char)]
    assert tokenizer.decode(ids) == text and ids != encode(tokenizer, text)
    return ids


def rendered(tokenizer, reply: str) -> str:
    messages = [{"role": "user", "content": "What is it?"},
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "Thanks."}]  # fmt: skip
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_a_recorded_reply_keeps_its_ids_and_the_prompt_its_text(tokenizer):
    history = history_for(tokenizer)
    ids = spelled(tokenizer, REPLY)
    history.record([*ids, *tokenizer.eos_token_ids])
    text = rendered(tokenizer, REPLY)
    canonical = encode(tokenizer, text)
    resolved = history.resolve(text, canonical)
    assert contains(resolved, ids) and not contains(canonical, ids)
    assert tokenizer.decode(resolved) == text


def test_no_recorded_reply_in_the_prompt_leaves_its_tokens(tokenizer):
    history = history_for(tokenizer)
    history.record(spelled(tokenizer, "A reply this prompt never shows."))
    text = rendered(tokenizer, REPLY)
    canonical = encode(tokenizer, text)
    assert history.resolve(text, canonical) is canonical
    assert history.resolve_prompt(text, canonical, 7) == (canonical, 7)


def test_the_cache_boundary_moves_with_the_prompts_end(tokenizer):
    history = history_for(tokenizer)
    ids = spelled(tokenizer, REPLY)
    history.record(ids)
    text = rendered(tokenizer, REPLY)
    canonical = encode(tokenizer, text)
    resolved, boundary = history.resolve_prompt(text, canonical, len(canonical) - 3)
    assert boundary == len(resolved) - 3 and resolved[boundary:] == canonical[-3:]


def test_the_answer_after_a_reasoning_block_is_found_without_it(tokenizer):
    """Templates drop earlier turns' reasoning: the ids after the block's end (its newlines
    skipped) stand for the answer."""
    close = encode(tokenizer, "<|im_start|>")  # a one-token marker standing for </think>
    assert len(close) == 1
    history = TokenHistory(tokenizer.decode, lambda t: encode(tokenizer, t), think_end=close[0])
    answer = spelled(tokenizer, REPLY)
    history.record([*spelled(tokenizer, "Let me think."), *close, *encode(tokenizer, "\n\n"),
                    *answer])  # fmt: skip
    text = rendered(tokenizer, REPLY)
    assert contains(history.resolve(text, encode(tokenizer, text)), answer)


def test_short_replies_are_not_matched(tokenizer):
    history = history_for(tokenizer)
    history.record(spelled(tokenizer, "Noon."))
    text = rendered(tokenizer, "Noon.")
    canonical = encode(tokenizer, text)
    assert history.resolve(text, canonical) is canonical


def test_the_next_turn_hits_the_cache_past_a_sampled_reply(engine):
    """A reply forced into one-character tokens: the next turn's prompt carries those ids,
    and the prompt cache serves it through the reply; re-tokenized, it stops before."""
    tokenizer = engine.tokenizer
    builder = PromptBuilder(engine.loaded, history=engine.runner.history)
    pieces = [encode(tokenizer, char)[0] for char in "ab"]
    first = [{"role": "user", "content": "Say something."}]
    call = GenerateCall(
        chat=ChatInput(messages=first), max_tokens=24, cache_scope="token-history",
        sampling=SamplingParams(logit_bias={token: 100.0 for token in pieces}),
    )  # fmt: skip
    request = builder.build(call).request
    reply = generate(engine, request)
    assert len(reply.text) == 24 and set(reply.text) <= {"a", "b"}
    following = [*first, {"role": "assistant", "content": reply.text},
                 {"role": "user", "content": "And then?"}]  # fmt: skip
    turn = GenerateCall(chat=ChatInput(messages=following), max_tokens=2,
                        cache_scope="token-history")  # fmt: skip
    resolved = builder.build(turn).request
    canonical = PromptBuilder(engine.loaded).build(turn).request
    generated = [tokenizer.encode(char, add_special_tokens=False)[0] for char in reply.text]
    assert resolved.prompt_tokens[: len(request.prompt_tokens) + 24] == [
        *request.prompt_tokens, *generated]  # fmt: skip
    assert canonical.prompt_tokens != resolved.prompt_tokens
    past_reply = len(request.prompt_tokens) + 24
    assert generate(engine, canonical).end.cached_tokens < past_reply
    assert generate(engine, resolved).end.cached_tokens >= past_reply
