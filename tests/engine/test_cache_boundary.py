"""The prompt-cache boundary, found by probing the template per request (issue 50 item 7),
on the default model's real tokenizer under templates whose primer differs by mode: the
next turn of each conversation starts with exactly the tokens before the boundary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.acceleration.loader import LoadedModel
from inference.engine.prompting.cache_boundary import MAX_MODES, CacheBoundary
from inference.engine.prompting.prompt import PromptBuilder
from inference.protocol.wire import ChatInput, GenerateCall
from tests.conftest import with_chat_template

TURNS = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)
# Qwen3's shape: thinking off opens the turn with an empty think block that the next
# turn's history does not keep.
THINK_OFF = TURNS + (
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
# An empty think block kept before a text reply, dropped before a tool call.
KEPT_FOR_TEXT = (
    "{% if tools %}<|im_start|>system\ntools<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not m.get('tool_calls') %}<think></think>{% endif %}"
    "{% if m.get('tool_calls') %}<tool_call>{{ m['tool_calls'][0]['function']['name'] }}"
    "</tool_call>{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think></think>{% endif %}"
)
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
HI = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def builders(model_folder, tmp_path_factory) -> dict[str, PromptBuilder]:
    root = tmp_path_factory.mktemp("boundary")
    folders = {
        "chatml": model_folder,
        "think_off": with_chat_template(model_folder, root / "think_off", THINK_OFF),
        "kept_for_text": with_chat_template(model_folder, root / "kept", KEPT_FOR_TEXT),
    }
    return {name: _builder(folder) for name, folder in folders.items()}


def _builder(folder: Path) -> PromptBuilder:
    return PromptBuilder(LoadedModel(None, load_tokenizer(folder), 8192, 49152, folder))


def prepared(builder: PromptBuilder, messages: list[dict], **chat) -> tuple[list[int], int]:
    request = builder.build(GenerateCall(chat=ChatInput(messages=messages, **chat))).request
    return request.prompt_tokens, request.cache_boundary


def next_turn(messages: list[dict]) -> list[dict]:
    return [*messages, {"role": "assistant", "content": "Noon."},
            {"role": "user", "content": "Thanks!"}]  # fmt: skip


def tail(builder: PromptBuilder, prompt: list[int], boundary: int) -> str:
    return builder.loaded.tokenizer.decode(prompt[boundary:])


def test_a_prompt_the_next_turn_keeps_whole_is_stored_one_token_short(builders):
    """ChatML's history repeats the assistant header: all of the prompt is the next turn's
    prefix, and the last token is always computed."""
    chatml = builders["chatml"]
    prompt, boundary = prepared(chatml, HI)
    assert boundary == len(prompt) - 1
    following, _ = prepared(chatml, next_turn(HI))
    assert following[: len(prompt)] == prompt


@pytest.mark.parametrize(
    ("kwargs", "primer"),
    [({"enable_thinking": False}, "<think>\n\n</think>\n\n"), ({"enable_thinking": True}, "\n")],
)
def test_each_thinking_mode_gets_its_own_primer(builders, kwargs, primer):
    """Thinking off: the empty think block the next turn's history drops lies past the
    boundary; thinking on, the prompt is kept whole (one token short)."""
    think_off = builders["think_off"]
    prompt, boundary = prepared(think_off, HI, template_kwargs=kwargs)
    assert tail(think_off, prompt, boundary) == primer
    following, _ = prepared(think_off, next_turn(HI), template_kwargs=kwargs)
    assert following[:boundary] == prompt[:boundary]


def test_a_primer_dropped_before_a_tool_call_is_left_out(builders):
    """A text reply keeps `<think></think>` (the whole prompt is the next turn's prefix); a
    tool-call reply drops it, so with tools it lies past the boundary."""
    kept = builders["kept_for_text"]
    prompt, boundary = prepared(kept, HI)
    assert boundary == len(prompt) - 1
    tools = {"tools": [TIME], "tool_names": ["get_time"], "tool_choice": "auto"}
    prompt, boundary = prepared(kept, HI, **tools)
    # Past the boundary: the block, less a "<" token both replies start with.
    assert tail(kept, prompt, boundary) in ("<think></think>", "think></think>")
    call = {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": {}}}
    called = [*HI, {"role": "assistant", "content": "", "tool_calls": [call]},
              {"role": "tool", "content": "Noon."}]  # fmt: skip
    following, _ = prepared(kept, called, **tools)
    assert following[:boundary] == prompt[:boundary]


def tags(text: str) -> list[str]:
    """A stand-in tokenizer: each tag a token, each text between tags one."""
    return re.findall(r"<[^>]+>|[^<]+", text)


def test_a_mode_is_probed_once():
    renders = []

    def render(messages, tools=None, kwargs=None) -> str:
        renders.append(len(messages))
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<reply>"

    boundary = CacheBoundary(render, tags)
    hi = [{"role": "user", "content": "Hi"}]
    assert boundary.find(tags("<user>Hi<reply>"), hi, None, {}) == 2 and renders == [3]
    hello = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Yes"},
             {"role": "user", "content": "And?"}]  # fmt: skip
    prompt = tags(render(hello))
    renders.clear()
    assert boundary.find(prompt, hello, None, {}) == len(prompt) - 1
    assert renders == []  # the mode's primer, remembered
    boundary.find(tags("<user>Hi<reply>"), hi, None, {"enable_thinking": False})
    assert renders == [3]  # another mode: probed


def test_the_modes_remembered_are_bounded():
    """A client picks the template's variables: their modes cannot grow without end."""
    renders = []

    def render(messages, tools=None, kwargs=None) -> str:
        renders.append(kwargs)
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<reply>"

    boundary = CacheBoundary(render, tags)
    hi, prompt = [{"role": "user", "content": "Hi"}], tags("<user>Hi<reply>")
    for mode in range(MAX_MODES + 1):
        boundary.find(prompt, hi, None, {"mode": mode})
    renders.clear()
    boundary.find(prompt, hi, None, {"mode": MAX_MODES})  # the newest: remembered
    boundary.find(prompt, hi, None, {"mode": 0})  # the oldest: dropped, probed again
    assert renders == [{"mode": 0}]


def test_a_template_that_refuses_the_probe_gives_no_boundary():
    def render(messages, tools=None, kwargs=None) -> str:
        if len(messages) > 1:
            raise ValueError("one message only")
        return "<user>Hi<reply>"

    boundary = CacheBoundary(render, tags)
    assert (
        boundary.find(tags("<user>Hi<reply>"), [{"role": "user", "content": "Hi"}], None, {})
        is None
    )


def test_a_count_probes_nothing(builders):
    chatml = builders["chatml"]
    counted = chatml.build(GenerateCall(chat=ChatInput(messages=HI), count_only=True))
    assert counted.request is None and counted.prompt_tokens > 0
