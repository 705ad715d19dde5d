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


def completion_prompt_tokens(tokenizer, prompt: str) -> list[int]:
    # A BOS token only if the model asks for one, as mlx_lm.server encodes text.
    return list(tokenizer.encode(prompt))
