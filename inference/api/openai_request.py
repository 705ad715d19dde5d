"""OpenAI chat and text completion bodies, parsed into one ChatCall each."""

from __future__ import annotations

from .. import json_body
from ..chat import fields
from ..chat.call import ChatCall
from ..chat.messages import check_reasoning_effort, parse_messages, template_kwargs
from ..chat.structured import parse_structured_output
from ..chat.tools import parse_tools
from ..errors import ApiError


def parse_json_body(raw: bytes) -> dict:
    """The body as a JSON object, or a 400 saying what is wrong with it."""
    try:
        body = json_body.loads(raw)
    except json_body.JsonRejected as exc:
        raise ApiError(f"Invalid JSON in request body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError("Request body must be a JSON object")
    return body


def parse_prompt(body: dict) -> str:
    """Only a nonempty string prompt is accepted, as in mlx_lm.server."""
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(
            "prompt (a non-empty string) is required "
            "(token-array prompts are not accepted, matching mlx_lm.server)",
            param="prompt",
        )
    return prompt


def _generation_fields(body: dict, logprobs: tuple[bool, int], *, prediction: bool = False) -> dict:
    """The fields chat and text completions share, in mlx_lm.server's order; `logprobs`
    is checked first, apart, for mlx-bun's order of checks."""
    logprobs, top_logprobs = logprobs
    return dict(
        model=fields.model_name(body),
        stream=fields.stream(body),
        include_usage=fields.include_usage(body),
        max_tokens=fields.max_tokens(body),
        sampling=fields.sampling(body),
        stop=fields.stop(body),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        n=fields.n(body),
        adapter=fields.adapter(body),
        kv=fields.kv_cache(body),
        draft=fields.drafting(body, prediction=prediction),
    )


def parse_chat_completion(body: dict) -> ChatCall:
    """A /v1/chat/completions body. mlx-bun's order, so a body with several faults gets
    the same 400 from both: the messages, then logprobs, then reasoning_effort, then
    everything else."""
    messages = parse_messages(body)
    logprobs = fields.check_logprobs(body)
    effort = check_reasoning_effort(body)
    shared = _generation_fields(body, logprobs, prediction=True)
    return ChatCall(
        messages=messages,
        tools=parse_tools(body),
        structured=parse_structured_output(body),
        template_kwargs=template_kwargs(effort, body.get("chat_template_kwargs")),
        reasoning_effort=effort,
        cache_session=fields.cache_session(body),
        **shared,
    )


def parse_completion(body: dict) -> ChatCall:
    """A /v1/completions body: a raw prompt, no template. mlx-bun's order: the prompt, then
    logprobs, then everything else."""
    prompt = parse_prompt(body)
    shared = _generation_fields(body, fields.check_logprobs(body))
    return ChatCall(prompt=prompt, cache_session=fields.cache_session(body), **shared)
