"""The worker's prompt builder: template budgets and context checks, without a server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.loader import LoadedModel
from inference.engine.prompt import PromptBuilder, PromptRejected
from inference.engine.wire import ChatInput, GenerateCall
from tests.conftest import with_chat_template

# A template whose render takes minutes: 36 million loop steps.
SLOW_TEMPLATE = (
    "{% for i in range(6000) %}{% for j in range(6000) %}{% endfor %}{% endfor %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)


def _builder(folder: Path, *, render_seconds: float) -> PromptBuilder:
    tokenizer = load_tokenizer(folder)
    loaded = LoadedModel(None, tokenizer, context_length=64, vocab_size=49152, path=folder)
    return PromptBuilder(loaded, render_seconds=render_seconds)


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
