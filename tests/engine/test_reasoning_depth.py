"""reasoning_effort onto a template's own depth variable, on the real tokenizer."""

from __future__ import annotations

import pytest
from mlx_lm.utils import load_tokenizer

from inference.engine.acceleration.loader import LoadedModel
from inference.engine.prompting.prompt import PromptBuilder
from inference.engine.prompting.reasoning_depth import template_depth, template_levels
from inference.protocol.wire import ChatInput

# Qwen3.8's shape: it names low, medium and xhigh, and raises on anything else.
DEPTH_TEMPLATE = (
    "{% if reasoning_effort is defined and reasoning_effort not in ['low', 'medium', 'xhigh'] %}"
    "{{ raise_exception('unknown depth') }}{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "depth={{ reasoning_effort | default('unset') }}"
)


@pytest.mark.parametrize(
    ("effort", "levels", "depth"),
    [
        ("high", ("low", "medium", "xhigh"), "xhigh"),  # a tie goes to the deeper
        ("minimal", ("low", "medium", "xhigh"), "low"),
        ("medium", ("low", "medium", "high"), "medium"),
        ("xhigh", ("low", "medium", "high"), "high"),
        ("none", ("low", "medium", "high"), None),  # thinking off: no depth
        (None, ("low", "medium", "high"), None),
        ("high", (), "high"),  # reads the variable, names no level: any goes
        ("high", None, None),  # reads no such variable
    ],
)
def test_a_level_maps_to_the_nearest_the_template_names(effort, levels, depth):
    assert template_depth(effort, levels) == depth


def test_levels_are_read_from_the_template_source():
    assert template_levels(DEPTH_TEMPLATE) == ("low", "medium", "xhigh")
    assert template_levels("{{ messages }}") is None
    assert template_levels(None) is None


@pytest.fixture(scope="module")
def builder(model_folder) -> PromptBuilder:
    tokenizer = load_tokenizer(model_folder)
    tokenizer._tokenizer.chat_template = DEPTH_TEMPLATE
    return PromptBuilder(LoadedModel(None, tokenizer, 8192, 49152, model_folder))


def _rendered(builder: PromptBuilder, **chat) -> str:
    chat = ChatInput(messages=[{"role": "user", "content": "Hi"}], **chat)
    return builder._render(chat.messages, chat, tools_active=False)[0]  # the text


def test_the_template_gets_the_depth_it_names(builder):
    assert _rendered(builder, reasoning_effort="high").endswith("depth=xhigh")
    assert _rendered(builder, reasoning_effort="none").endswith("depth=unset")
    assert _rendered(builder).endswith("depth=unset")


def test_a_depth_the_client_set_itself_wins(builder):
    kwargs = {"reasoning_effort": "low"}
    assert _rendered(builder, reasoning_effort="high", template_kwargs=kwargs).endswith("depth=low")
