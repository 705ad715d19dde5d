"""From a validated call to the engine's request: template, tokens, grammar, output format.

This runs in the model worker, beside the tokenizer, so that nothing heavy
(template rendering, tokenization, grammar compilation) ever runs in the web
process. Client errors are `PromptRejected`, which the web side answers as a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ...protocol.vocabulary import vocabulary_difference
from ..acceleration.loader import LoadedModel
from ..drafts.draft_model import DraftModels, vocabulary
from ..drafts.drafting import DraftPlan
from ..drafts.fill import CallShape
from ..media.prompt import (
    MediaRefused,
    prepare_media,
    prompt_media,
    reads_string_content,
    template_messages,
    text_parts,
)
from .cache_boundary import CacheBoundary
from .fill_plan import call_shape, fill_plan
from .grammar import GrammarCompiler, GrammarError, degrade_instruction
from .kv_scheme import KVSchemeProblem, model_kv
from .output_parser import DEFAULT_TOOL_MARKERS, OutputFormat, think_markers, tool_sentinels
from .output_parser import json_tools as default_tool_parser
from .reasoning_depth import VARIABLE, template_depth, template_levels
from .render_limit import RenderTimeout, time_limit
from .request import GenerationRequest
from .token_history import TokenHistory, history_for
from .tool_prompts import forced_call_grammar, tools_instruction, with_system


@dataclass(frozen=True)
class PromptLimits:
    """What one prompt may cost the worker (MLXLAB_TEMPLATE_RENDER_SECONDS, MLXLAB_GRAMMAR_*)."""

    render_seconds: float = 10.0
    grammar_seconds: float = 10.0
    grammar_cache_bytes: int = 256 << 20
    grammar_enabled: bool = True  # MLXLAB_GRAMMAR=0: every constraint goes by prompt
    fill: str = "off"  # MLXLAB_FILL: tool-call fast-forwarding, off | strict | echo


class PromptRejected(ValueError):
    """The request cannot become a prompt for this model; a client error."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True)
class Prepared:
    """The engine's request (None when only counting), and a warning for the client."""

    request: GenerationRequest | None
    prompt_tokens: int
    warning: str | None = None


# A prefix of this many characters per context token overflows the context for any
# ordinary text (BPE tokens average 3 to 5 characters); if it does not, all is counted.
CHARS_PER_TOKEN = 32
PREFIX_CUT_SLACK = 4


class PromptBuilder:
    """Builds prompts for one loaded model; owns its grammar compiler."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        limits: PromptLimits | None = None,
        draft_models: DraftModels | None = None,
        name: str = "",
        history: TokenHistory | None = None,
    ) -> None:
        self.loaded = loaded
        self.name = name or loaded.path.name
        self.draft_models = draft_models or DraftModels()
        self._vocabulary: dict[str, int] | None = None  # the target's, once a draft asks
        self._draft_differences: dict[str, str | None] = {}  # draft folder -> difference
        self.limits = limits or PromptLimits()
        self.render_seconds = self.limits.render_seconds
        self._compiler: GrammarCompiler | None = None
        tokenizer = loaded.tokenizer
        self.think = think_markers(tokenizer)  # None: no reasoning channel to split off
        self.tool_markers = (
            (tokenizer.tool_call_start, tokenizer.tool_call_end)
            if tokenizer.has_tool_calling
            else DEFAULT_TOOL_MARKERS
        )
        self.tool_sentinels = tool_sentinels(tokenizer)
        self.boundary = CacheBoundary(
            self.render, lambda text: tokenizer.encode(text, add_special_tokens=False)
        )
        self.depth_levels = template_levels(getattr(tokenizer, "chat_template", None))
        self.string_content = reads_string_content(self._apply_template)
        self.history = history or history_for(tokenizer)  # the engine's: it records replies

    @property
    def compiler(self) -> GrammarCompiler:
        if self._compiler is None:
            tokenizer = self.loaded.tokenizer
            self._compiler = GrammarCompiler(
                tokenizer,
                self.loaded.vocab_size,
                sorted(tokenizer.eos_token_ids),
                max_bytes=self.limits.grammar_cache_bytes,
                budget_seconds=self.limits.grammar_seconds,
            )
        return self._compiler

    @cached_property
    def call_shape(self) -> CallShape | None:
        """How this model's template writes a tool call (fill_plan.py), read once."""
        return call_shape(self.render, self.tool_markers)

    def build(self, call) -> Prepared:
        """`call` is a wire.GenerateCall; raises PromptRejected for a client error."""
        media = None
        if call.chat is not None:
            chat = self._chat(call.chat, compile=not call.count_only)
            prompt, boundary, grammar, output, warning, media = chat
        else:
            prompt = self._encode(call.text, "prompt")  # a BOS only if the model asks
            # A raw prompt has no turns: no cache boundary, nothing stored before its end.
            boundary, grammar, output, warning = None, None, OutputFormat(think=None), None
        if call.count_only:
            self._check_fits(prompt, "messages")
            return Prepared(None, len(prompt), warning)
        request = self._request(call, prompt, grammar, output, boundary, media)
        return Prepared(request, len(prompt), warning)

    def _chat(self, chat, *, compile: bool = True):
        """`compile` False (a count): the prompt alone, no grammar compiled for it, no
        cache boundary probed."""
        messages = chat.messages
        parts = prompt_media(messages)
        if parts:
            messages = template_messages(messages)
        forced = chat.tool_choice not in ("auto", "none")
        active = bool(chat.tools) and chat.tool_choice != "none"
        spec = forced_call_grammar(chat.tools, chat.tool_choice) if forced else chat.structured
        grammar, warning, unenforced = None, None, None
        if spec is not None and compile and not self.limits.grammar_enabled:
            unenforced = "grammar compilation disabled by MLXLAB_GRAMMAR=0"
        elif spec is not None and compile:
            try:
                grammar = self.compiler.compile(spec)
            except GrammarError as error:
                if forced:  # our own schema from the tool's parameters
                    raise PromptRejected(
                        f"tool parameters are not a usable JSON schema: {error}"
                    ) from None
                unenforced = str(error)
        if unenforced is not None:
            warning = f"grammar not enforced: {unenforced} - falling back to prompt injection"
            # A system message of its own, first, as mlx-bun sends it.
            messages = [{"role": "system", "content": degrade_instruction(spec)}, *messages]
        text, *rendering = self._render(messages, chat, active)
        prompt = self._encode(text, "messages", add_special_tokens=False)
        boundary = self.boundary.find(prompt, *rendering) if compile else None
        media = None
        if parts:
            # The processor repeats each placeholder per embedding, all before the
            # boundary (the primer follows the last turn): the boundary moves as far.
            expanded, media = self._media(text, parts)
            if boundary is not None:
                boundary += len(expanded) - len(prompt)
            prompt = expanded
        else:
            prompt, boundary = self.history.resolve_prompt(text, prompt, boundary)
        tokenizer = self.loaded.tokenizer
        output = OutputFormat(
            think=self.think,
            starts_in_reasoning=self.think is not None
            and text.rfind(self.think[0]) > text.rfind(self.think[1]),
            tool_markers=self.tool_markers if active else None,
            tool_sentinels=self.tool_sentinels if active else None,
            tool_parser=tokenizer.tool_parser or default_tool_parser.parse_tool_call,
            tools=chat.tools or None,
            tool_names=frozenset(chat.tool_names) if active else frozenset(),
            forced_tool_call=forced,
        )
        return prompt, boundary, grammar, output, warning, media

    def _media(self, text: str, parts: list[dict]):
        """The prompt's tokens with its placeholders expanded, and its media as inputs."""
        try:
            return prepare_media(self.loaded, self.name, text, parts)
        except MediaRefused as error:
            raise PromptRejected(str(error), param="messages", code=error.code) from None

    def _render(self, messages: list[dict], chat, tools_active: bool) -> tuple:
        """The prompt's text, and the messages, tools and variables it was rendered from
        (which the cache boundary's probe renders again, continued)."""
        kwargs = chat.template_kwargs
        depth = template_depth(chat.reasoning_effort, self.depth_levels)
        if depth is not None and VARIABLE not in kwargs:  # the client's own value wins
            kwargs = {**kwargs, VARIABLE: depth}
        if not tools_active:
            return self.render(messages, kwargs=kwargs), messages, None, kwargs
        with_tools = self.render(messages, tools=chat.tools, kwargs=kwargs)
        if with_tools != self.render(messages, kwargs=kwargs):
            return with_tools, messages, chat.tools, kwargs
        # The template ignores tools: tell the model about them in the system message.
        messages = with_system(messages, tools_instruction(chat.tools, self.tool_markers))
        return self.render(messages, kwargs=kwargs), messages, None, kwargs

    def render(self, messages: list[dict], *, tools=None, kwargs=None) -> str:
        """The prompt text; a template that rejects the messages or overruns is a 400."""
        if not self.string_content:
            messages = text_parts(messages)
        try:
            with time_limit(self.render_seconds):
                return self._apply_template(messages, tools=tools, kwargs=kwargs)
        except RenderTimeout:
            raise PromptRejected(
                f"the chat template took longer than {self.render_seconds:g} s to render",
                param="messages",
            ) from None
        except Exception as exc:  # jinja raises whatever the template author chose
            raise PromptRejected(f"prompt build failed: {exc}", param="messages") from None

    def _apply_template(self, messages: list[dict], *, tools=None, kwargs=None) -> str:
        return self.loaded.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=False,
            **(kwargs or {}),
        )

    def _encode(self, text: str, param: str, **options) -> list[int]:
        """The prompt's tokens; one far past the context is refused from a prefix alone.

        Tokenizing 8 MB takes seconds, and every request for this model waits behind
        it. A prefix's token count, less a few for the cut, is a lower bound on the
        whole's: a prefix that already overflows the context proves the whole does.
        """
        encode = self.loaded.tokenizer.encode
        context_length = self.loaded.context_length
        prefix_chars = context_length * CHARS_PER_TOKEN
        if len(text) > prefix_chars:
            # A cut inside a word may split its last token in two; allow for a few.
            counted = len(encode(text[:prefix_chars], **options)) - PREFIX_CUT_SLACK
            if counted >= context_length:
                raise PromptRejected(
                    f"The prompt is at least {counted} tokens long (counted in its first "
                    f"{prefix_chars} of {len(text)} characters), which leaves no room to "
                    f"generate in this model's context length of {context_length} tokens.",
                    param=param,
                    code="context_length_exceeded",
                )
        return list(encode(text, **options))

    def _check_fits(self, prompt: list[int], param: str) -> int:
        """The tokens left to generate in the context after `prompt`; at least one."""
        context_length = self.loaded.context_length
        room = context_length - len(prompt)
        if room < 1:
            raise PromptRejected(
                f"The prompt is {len(prompt)} tokens long, which leaves no room to generate "
                f"in this model's context length of {context_length} tokens.",
                param=param,
                code="context_length_exceeded",
            )
        return room

    def _draft_plan(self, call) -> DraftPlan | None:
        """Prompt lookup when asked for, or by default for a request that predicts."""
        method = call.draft_model or ("ngram" if call.prediction is not None else "none")
        if method == "none":
            return None
        predicted = call.prediction or ""
        if len(predicted) > self.loaded.context_length * CHARS_PER_TOKEN:
            raise PromptRejected(
                "prediction is far longer than this model's context length", param="prediction"
            )
        tokens = tuple(self.loaded.tokenizer.encode(predicted, add_special_tokens=False))
        path, companion = "", ""
        if method != "ngram":
            path = self._check_draft_model(method, call.draft_path)
            method, companion = "model", call.draft_companion
        try:
            return DraftPlan(method, call.num_draft_tokens, tokens, path, companion)
        except ValueError as exc:
            raise PromptRejected(str(exc), param="num_draft_tokens") from None

    def _check_draft_model(self, draft: str, path: str) -> str:
        """The draft model's folder, once its tokens are known to mean what the target's do
        (the same token -> id map); the comparison is kept by folder."""
        if not path:
            raise PromptRejected(f"no draft model named {draft!r}", param="draft_model")
        if path not in self._draft_differences:
            try:
                theirs = self.draft_models.vocabulary(path)
            except Exception as exc:  # a folder without a readable tokenizer
                raise PromptRejected(
                    f"draft model {draft!r} cannot be loaded: {exc}", param="draft_model"
                ) from None
            if self._vocabulary is None:
                self._vocabulary = vocabulary(self.loaded.tokenizer)
            self._draft_differences[path] = vocabulary_difference(
                self._vocabulary, theirs, ("{target}", "{draft}")
            )
        difference = self._draft_differences[path]
        if difference is not None:
            difference = difference.format(target=self.name, draft=draft)
            raise PromptRejected(
                f"draft model {draft!r} has another vocabulary than {self.name!r} "
                f"({difference}); a draft model must share its target's vocabulary",
                param="draft_model",
                code="draft_vocabulary_mismatch",
            )
        return path

    def _request(
        self, call, prompt: list[int], grammar, output, boundary, media=None
    ) -> GenerationRequest:
        """Fit the request into the context window, or say plainly why it cannot."""
        vocab_size = self.loaded.vocab_size
        context_length = self.loaded.context_length
        for token in call.sampling.logit_bias or {}:
            # MLX does not bounds-check scatter indices: an unknown id would crash the worker.
            if not 0 <= token < vocab_size:
                raise PromptRejected(
                    f"logit_bias token id {token} is out of range for a vocabulary of {vocab_size}",
                    param="logit_bias",
                )
        if call.sampling.top_k >= vocab_size:
            # mlx-lm's top-k sampler raises mid-generation unless 0 < top_k < vocabulary.
            raise PromptRejected(
                f"top_k must be less than the vocabulary size ({vocab_size})", param="top_k"
            )
        try:
            kv = model_kv(self.loaded.model, call.kv)
        except KVSchemeProblem as problem:
            raise PromptRejected(problem.message, param=problem.param) from None
        room = self._check_fits(prompt, "messages" if call.chat is not None else "prompt")
        if call.max_tokens is not None and call.max_tokens > room:
            raise PromptRejected(
                f"This model's context length is {context_length} tokens, but the request asks "
                f"for {len(prompt) + call.max_tokens} ({len(prompt)} in the prompt and "
                f"{call.max_tokens} to generate). Shorten the prompt or lower max_tokens.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        draft = self._draft_plan(call)
        fill = None
        if self.limits.fill != "off" and call.chat is not None and call.chat.tools:
            shape, marker = self.call_shape, self.tool_markers[0]
            fill = fill_plan(
                self.limits.fill, call, shape, marker, grammar=grammar, draft=draft, media=media
            )
        try:
            return GenerationRequest(
                prompt_tokens=prompt,
                max_tokens=call.max_tokens or min(call.default_max_tokens, room),
                sampling=call.sampling,
                stop=call.stop,
                logprobs=call.logprobs,
                top_logprobs=call.top_logprobs,
                grammar=grammar,
                output=output,
                adapters=call.adapters,
                cache_scope=call.cache_scope,
                cache_session=call.cache_session,
                cache_boundary=boundary,
                kv=kv,
                draft=draft,
                media=media,
                fill=fill,
            )
        except ValueError as exc:
            raise PromptRejected(str(exc)) from None
