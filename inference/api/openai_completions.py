"""OpenAI text completions: a raw string prompt, no chat template."""

from __future__ import annotations

from .errors import ApiError


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


def completion_logprobs(body: dict) -> tuple[bool, int | None]:
    """The legacy API sends `logprobs` as a count of alternatives; accept bool too."""
    value = body.get("logprobs")
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 11:
            raise ApiError("logprobs must be at most 11", param="logprobs")
        return True, value
    if value is not None and not isinstance(value, bool):  # "yes" or 0.5 must not mean true
        raise ApiError("logprobs must be a boolean or an integer from 0 to 11", param="logprobs")
    return bool(value), None


def completion_prompt_tokens(tokenizer, prompt: str) -> list[int]:
    # A BOS token only if the model asks for one, as mlx_lm.server encodes text.
    return list(tokenizer.encode(prompt))
