"""Markers as the model declares them (issue 50 item 7): `<think>` splitting only for a
template that uses think tags, and tool calls opened and closed by sentinel tokens for a
tokenizer that declares its tool-call markers as single tokens. On the default model's
real tokenizer, fed token by token through the engine's Sequence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.acceleration.loader import LoadedModel
from inference.engine.loop.sequence import Sequence
from inference.engine.prompting.output_parser import think_markers, tool_sentinels
from inference.engine.prompting.prompt import PromptBuilder
from inference.protocol.events import Finished, ReasoningDelta, TextDelta, ToolCall
from inference.protocol.wire import ChatInput, GenerateCall
from tests.conftest import THINKING_TEMPLATE, with_chat_template

HI = [{"role": "user", "content": "What time is it?"}]
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
CALL = '{"name": "get_time", "arguments": {"zone": "UTC"}}'
WITH_TOOLS = {"tools": [TIME], "tool_names": ["get_time"], "tool_choice": "auto"}
# Two of the default model's special tokens renamed as a tool call's markers: one token each.
SENTINELS = {"<jupyter_start>": "<tool_call>", "<jupyter_text>": "</tool_call>"}
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nCall a tool as <tool_call>{...}</tool_call>: "
    "{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def sentinel_folder(source: Path, folder: Path) -> Path:
    """The default model's files, its tokenizer naming <tool_call> and </tool_call> as
    single tokens and declaring json_tools (mlx-lm's tool_parser_type)."""
    with_chat_template(source, folder, TOOLS_TEMPLATE)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({**config, "tool_parser_type": "json_tools"})
    )
    text = (source / "tokenizer.json").read_text()
    for old, new in SENTINELS.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    (folder / "tokenizer.json").unlink()  # a link to the default model's
    (folder / "tokenizer.json").write_text(text)
    return folder


@pytest.fixture(scope="module")
def builders(model_folder, tmp_path_factory) -> dict[str, PromptBuilder]:
    """The worker's prompt builder over each folder's tokenizer (no weights needed)."""
    root = tmp_path_factory.mktemp("markers")
    folders = {
        "plain": model_folder,
        "thinking": with_chat_template(model_folder, root / "thinking", THINKING_TEMPLATE),
        "sentinels": sentinel_folder(model_folder, root / "sentinels"),
    }
    return {
        name: PromptBuilder(LoadedModel(None, load_tokenizer(folder), 8192, 49152, folder))
        for name, folder in folders.items()
    }


def run(builder: PromptBuilder, tokens: list[int], **chat) -> list:
    """The events of a reply made of `tokens`, then end of sequence."""
    call = GenerateCall(chat=ChatInput(messages=HI, **chat), max_tokens=64)
    request = builder.build(call).request
    events = []
    sequence = Sequence(0, request, events.append, builder.loaded.tokenizer)
    for token in tokens:
        sequence.on_token(token, None, None)
    eos = next(iter(builder.loaded.tokenizer.eos_token_ids))
    sequence.on_token(eos, None, "stop")
    return events


def text(events, kind=TextDelta) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def encode(builder: PromptBuilder, *pieces: str) -> list[int]:
    """Each piece encoded apart: "<tool_call" then ">" spells the marker in plain tokens."""
    tokenizer = builder.loaded.tokenizer
    return [t for piece in pieces for t in tokenizer.encode(piece, add_special_tokens=False)]


def test_think_tags_split_only_for_a_template_that_uses_them(builders):
    plain, thinking = builders["plain"], builders["thinking"]
    assert plain.think is None and thinking.think == ("<think>", "</think>")
    reply = encode(plain, "<think>a</think>b")
    said = run(plain, reply)
    assert text(said) == "<think>a</think>b" and not text(said, ReasoningDelta)
    split = run(thinking, reply, template_kwargs={"enable_thinking": False})
    assert (text(split, ReasoningDelta), text(split)) == ("a", "b")


def test_sentinels_are_what_the_tokenizer_declares(builders):
    tokenizer = builders["sentinels"].loaded.tokenizer
    start, end = (tokenizer.encode(m, add_special_tokens=False) for m in SENTINELS.values())
    assert tool_sentinels(tokenizer) == (start[0], end[0]) and len(start) == len(end) == 1
    assert tool_sentinels(builders["plain"].loaded.tokenizer) is None  # markers in many tokens
    assert think_markers(tokenizer) is None  # its template names no think tag


def test_a_call_between_sentinel_tokens_is_a_tool_call(builders):
    sentinels = builders["sentinels"]
    opens, closes = sentinels.tool_sentinels
    reply = [*encode(sentinels, "Let me check. "), opens, *encode(sentinels, CALL), closes]
    events = run(sentinels, reply, **WITH_TOOLS)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_time", {"zone": "UTC"})]
    assert text(events) == "Let me check. "
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "tool_calls"


def test_the_markers_spelled_in_other_tokens_are_text_where_sentinels_are_declared(builders):
    sentinels, plain = builders["sentinels"], builders["plain"]
    spelled = ("<tool_call", ">", CALL, "</tool_call", ">")
    events = run(sentinels, encode(sentinels, *spelled), **WITH_TOOLS)
    assert not any(isinstance(e, ToolCall) for e in events)
    assert text(events) == f"<tool_call>{CALL}</tool_call>"
    # Without sentinels the decoded text is all there is, and it is a call.
    events = run(plain, encode(plain, *spelled), **WITH_TOOLS)
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["get_time"]


def test_a_stray_closing_sentinel_is_text(builders):
    sentinels = builders["sentinels"]
    _, closes = sentinels.tool_sentinels
    events = run(sentinels, [*encode(sentinels, "Done."), closes], **WITH_TOOLS)
    assert text(events) == "Done.</tool_call>" and not any(isinstance(e, ToolCall) for e in events)
