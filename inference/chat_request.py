"""A chat completion request made ready for the engine: prompt, grammar, output format."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from .api.errors import ApiError
from .api.openai_chat import parse_messages, render_chat, template_kwargs
from .api.openai_structured import degrade_instruction, parse_structured_output
from .api.openai_tools import ToolPlan, forced_call_grammar, parse_tools, tools_instruction
from .engine import Engine
from .engine.grammar import GrammarCompiler, GrammarError, GrammarSpec
from .engine.output_parser import DEFAULT_THINK, DEFAULT_TOOL_MARKERS, OutputFormat
from .engine.output_parser import json_tools as default_tool_parser


@dataclass(frozen=True)
class PreparedChat:
    prompt: list[int]
    grammar: object | None
    output: OutputFormat
    warning: str | None = None  # set when a grammar could not be enforced


@functools.cache
def grammar_compiler(engine: Engine) -> GrammarCompiler:
    """One compiler (and cache) per loaded model."""
    tokenizer = engine.tokenizer
    return GrammarCompiler(tokenizer, engine.vocab_size, sorted(tokenizer.eos_token_ids))


def _with_system(messages: list[dict], instruction: str) -> list[dict]:
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def _markers(tokenizer) -> tuple[tuple[str, str], tuple[str, str]]:
    think = (
        (tokenizer.think_start, tokenizer.think_end) if tokenizer.has_thinking else DEFAULT_THINK
    )
    tool = (
        (tokenizer.tool_call_start, tokenizer.tool_call_end)
        if tokenizer.has_tool_calling
        else DEFAULT_TOOL_MARKERS
    )
    return think, tool


def _render(tokenizer, messages, plan: ToolPlan, kwargs: dict, tool_markers) -> str:
    if not plan.active:
        return render_chat(tokenizer, messages, kwargs=kwargs)
    with_tools = render_chat(tokenizer, messages, tools=plan.tools, kwargs=kwargs)
    if with_tools != render_chat(tokenizer, messages, kwargs=kwargs):
        return with_tools
    # The template ignores tools: tell the model about them in the system message.
    return render_chat(
        tokenizer, _with_system(messages, tools_instruction(plan, tool_markers)), kwargs=kwargs
    )


async def _compile(engine: Engine, spec: GrammarSpec):
    return await asyncio.to_thread(grammar_compiler(engine).compile, spec)


async def prepare_chat(body: dict, engine: Engine) -> PreparedChat:
    """Validate the chat fields and build what the engine needs for them."""
    messages = parse_messages(body)
    plan = parse_tools(body)
    structured = parse_structured_output(body)
    kwargs = template_kwargs(body)
    tokenizer = engine.tokenizer
    think, tool_markers = _markers(tokenizer)
    spec = forced_call_grammar(plan) if plan.forced else structured
    grammar, warning = None, None
    if spec is not None:
        try:
            grammar = await _compile(engine, spec)
        except GrammarError as error:
            if plan.forced:  # our own schema from the tool's parameters
                raise ApiError(f"tool parameters are not a usable JSON schema: {error}") from None
            warning = f"grammar not enforced: {error} - falling back to prompt injection"
            messages = _with_system(messages, degrade_instruction(spec))
    text = _render(tokenizer, messages, plan, kwargs, tool_markers)
    prompt = tokenizer.encode(text, add_special_tokens=False)
    output = OutputFormat(
        think=think,
        starts_in_reasoning=text.rfind(think[0]) > text.rfind(think[1]),
        tool_markers=tool_markers if plan.active else None,
        tool_parser=tokenizer.tool_parser or default_tool_parser.parse_tool_call,
        tools=plan.tools or None,
        tool_names=plan.names if plan.active else frozenset(),
        forced_tool_call=plan.forced,
    )
    return PreparedChat(prompt=list(prompt), grammar=grammar, output=output, warning=warning)
