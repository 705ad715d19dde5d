"""The worker's prompt builder: template budgets and context checks, without a server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.acceleration.loader import LoadedModel
from inference.engine.prompting.grammar import GrammarCompiler, GrammarError
from inference.engine.prompting.prompt import PromptBuilder, PromptLimits, PromptRejected
from inference.protocol.grammar import GrammarSpec
from inference.protocol.wire import ChatInput, GenerateCall
from tests.conftest import with_chat_template

# A template whose render takes minutes: 36 million loop steps.
SLOW_TEMPLATE = (
    "{% for i in range(6000) %}{% for j in range(6000) %}{% endfor %}{% endfor %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)


def _builder(folder: Path, *, render_seconds: float) -> PromptBuilder:
    tokenizer = load_tokenizer(folder)
    loaded = LoadedModel(None, tokenizer, context_length=64, vocab_size=49152, path=folder)
    return PromptBuilder(loaded, limits=PromptLimits(render_seconds=render_seconds))


@pytest.fixture(scope="module")
def slow_template_folder(model_folder, tmp_path_factory) -> Path:
    return with_chat_template(model_folder, tmp_path_factory.mktemp("slow"), SLOW_TEMPLATE)


def _chat(text: str = "Hi", **fields) -> GenerateCall:
    return GenerateCall(chat=ChatInput(messages=[{"role": "user", "content": text}]), **fields)


def test_a_render_over_its_budget_is_refused_in_time(slow_template_folder):
    builder = _builder(slow_template_folder, render_seconds=0.3)
    started = time.monotonic()
    with pytest.raises(PromptRejected) as refused:
        builder.build(_chat())
    assert time.monotonic() - started < 3
    assert refused.value.message == "the chat template took longer than 0.3 s to render"
    assert refused.value.param == "messages"


def test_the_tokenized_prompt_is_checked_against_the_context(model_folder):
    builder = _builder(model_folder, render_seconds=5)
    counted = builder.build(_chat(count_only=True))
    assert counted.request is None and 0 < counted.prompt_tokens < 64
    with pytest.raises(PromptRejected) as refused:
        builder.build(_chat("word " * 100))
    assert refused.value.code == "context_length_exceeded"
    with pytest.raises(PromptRejected) as refused:
        builder.build(_chat(max_tokens=60))
    assert refused.value.param == "max_tokens"
    request = builder.build(_chat()).request
    assert request.max_tokens == 64 - counted.prompt_tokens  # the default fits the room left


def _enum_schema(count: int) -> GrammarSpec:
    return GrammarSpec(
        "json_schema", json.dumps({"enum": [f"value-{i}-abcdefgh" for i in range(count)]})
    )


def test_a_count_compiles_no_grammar_and_is_checked_against_the_context(model_folder):
    builder = _builder(model_folder, render_seconds=5)
    structured = ChatInput(
        messages=[{"role": "user", "content": "Hi"}], structured=_enum_schema(50)
    )
    assert builder.build(GenerateCall(chat=structured, count_only=True)).prompt_tokens > 0
    assert builder._compiler is None  # nothing compiled for a count
    with pytest.raises(PromptRejected) as refused:
        builder.build(_chat("word " * 100, count_only=True))
    assert refused.value.code == "context_length_exceeded"


def test_a_compile_over_its_budget_is_refused_then_served_from_the_cache(model_folder):
    tokenizer = load_tokenizer(model_folder)
    compiler = GrammarCompiler(tokenizer, 49152, [2], budget_seconds=0.05)
    spec = _enum_schema(6000)  # about a second to compile here
    started = time.monotonic()
    with pytest.raises(GrammarError, match="took longer than 0.05 s"):
        compiler.compile(spec)
    assert time.monotonic() - started < 0.5
    compiler.budget_seconds = 60
    compiled = compiler.compile(spec)  # waits on the compile already running
    assert compiler.compiled == 1
    assert compiler.compile(spec) is compiled


def test_compiled_grammars_are_bounded_by_bytes(model_folder):
    tokenizer = load_tokenizer(model_folder)
    small = [_enum_schema(count) for count in (10, 11, 12)]
    sizes = []
    probe = GrammarCompiler(tokenizer, 49152, [2])
    for spec in small:
        sizes.append(probe.compile(spec).memory_size_bytes)
    assert probe.bytes == sum(sizes)
    compiler = GrammarCompiler(tokenizer, 49152, [2], max_bytes=sizes[0] + sizes[1])
    first = compiler.compile(small[0])
    compiler.compile(small[1])
    compiler.compile(small[2])  # evicts the least recently used: the first
    assert compiler.bytes <= compiler.max_bytes
    assert compiler.compile(small[0]) is not first and compiler.compiled == 4
    huge = GrammarCompiler(tokenizer, 49152, [2], max_bytes=1)
    huge.compile(small[0])
    assert huge.bytes == 0  # larger than the whole cache: served, never kept
