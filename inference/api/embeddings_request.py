"""An OpenAI /v1/embeddings body, parsed into one EmbeddingsCall.

OpenAI's rules: `input` is a non-empty string, or an array of them, or an array of token
ids, or an array of such arrays; `encoding_format` is "float" (the default) or "base64";
`dimensions` is a positive integer. The counts are the server's (MLXLAB_EMBEDDING_*),
published in the OpenAPI schema; an input's tokens are checked again by the worker, which
tokenizes texts and knows the model's context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labsettings import lab_settings

from ..chat import fields
from ..errors import ApiError

ENCODING_FORMATS = ("float", "base64")
INPUT_USAGE = (
    "input must be a non-empty string, an array of non-empty strings, an array of token "
    "ids, or an array of non-empty arrays of token ids"
)


@dataclass(frozen=True)
class EmbeddingsCall:
    """What to embed (texts or token ids, never both), with which model, and how to answer."""

    model: str | None
    texts: list[str] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    encoding_format: str = "float"
    dimensions: int | None = None


def _is_token(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _token_list(value, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(_is_token(t) for t in value):
        raise ApiError(
            f"{where} must be a non-empty array of token ids (integers >= 0)", param="input"
        )
    limit = lab_settings.embedding_max_input_tokens
    if len(value) > limit:
        raise ApiError(
            f"{where} is {len(value)} tokens; an input may have at most {limit} on this server",
            param="input",
            code="context_length_exceeded",
        )
    return value


def _inputs(value) -> tuple[list[str], list[list[int]]]:
    """(texts, token lists) of `input`: exactly one of the two is non-empty."""
    if isinstance(value, str):
        if not value:
            raise ApiError(f"input is an empty string; {INPUT_USAGE}", param="input")
        return [value], []
    if not isinstance(value, list) or not value:
        raise ApiError(INPUT_USAGE, param="input")
    if all(isinstance(item, str) for item in value):
        empty = next((i for i, item in enumerate(value) if not item), None)
        if empty is not None:
            raise ApiError(f"input[{empty}] is an empty string; {INPUT_USAGE}", param="input")
        return value, []
    if all(_is_token(item) for item in value):
        return [], [_token_list(value, "input")]
    if all(isinstance(item, list) for item in value):
        return [], [_token_list(item, f"input[{i}]") for i, item in enumerate(value)]
    raise ApiError(INPUT_USAGE, param="input")


def _encoding_format(body: dict) -> str:
    value = body.get("encoding_format")
    if value is None:
        return "float"
    if value not in ENCODING_FORMATS:
        raise ApiError("encoding_format must be 'float' or 'base64'", param="encoding_format")
    return value


def parse_embeddings(body: dict) -> EmbeddingsCall:
    """A /v1/embeddings body, every field checked; a 400 names the first wrong one."""
    if "input" not in body:
        raise ApiError(INPUT_USAGE, param="input")
    texts, token_ids = _inputs(body["input"])
    limit = lab_settings.embedding_max_inputs
    count = len(texts) or len(token_ids)
    if count > limit:
        raise ApiError(
            f"input has {count} items; at most {limit} may be embedded in one request",
            param="input",
        )
    fields.field(body, "user", str)  # OpenAI's end-user id: checked, not used
    return EmbeddingsCall(
        model=fields.model_name(body),
        texts=texts,
        token_ids=token_ids,
        encoding_format=_encoding_format(body),
        dimensions=fields.field(body, "dimensions", int, low=1),
    )
