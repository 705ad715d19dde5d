"""A /v1/rerank body (vLLM's, Cohere's and Jina's shape), parsed into one RerankRequest.

`query` is a non-empty string; `documents` a non-empty array of non-empty strings or
`{"text": str}` objects (Cohere's and Jina's), at most MLXLAB_EMBEDDING_MAX_INPUTS of them;
`top_n` a positive integer (unset: every document); `return_documents` a boolean, true
unless sent false, as vLLM and Jina default it; `instruction` a non-empty string, a decoder
reranker's task line (its model card's <Instruct>). A pair's tokens are checked by the worker,
which tokenizes and knows the model's context.
"""

from __future__ import annotations

from dataclasses import dataclass

from labsettings import lab_settings

from ..chat import fields
from ..errors import ApiError

DOCUMENTS_USAGE = (
    "documents must be a non-empty array of non-empty strings or of objects with a "
    "non-empty 'text' string"
)


@dataclass(frozen=True)
class RerankRequest:
    model: str | None
    query: str
    documents: list[str]
    top_n: int | None = None
    return_documents: bool = True
    instruction: str | None = None


def _document(value, index: int) -> str:
    text = value.get("text") if isinstance(value, dict) else value
    if not isinstance(text, str) or not text:
        raise ApiError(f"documents[{index}] is not a non-empty string or {{'text': string}}; "
                       f"{DOCUMENTS_USAGE}", param="documents")  # fmt: skip
    return text


def _documents(value) -> list[str]:
    if not isinstance(value, list) or not value:
        raise ApiError(DOCUMENTS_USAGE, param="documents")
    limit = lab_settings.embedding_max_inputs
    if len(value) > limit:
        raise ApiError(
            f"documents has {len(value)} items; at most {limit} may be reranked in one request",
            param="documents",
        )
    return [_document(item, index) for index, item in enumerate(value)]


def parse_rerank(body: dict) -> RerankRequest:
    """A /v1/rerank body, every field checked; a 400 names the first wrong one."""
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise ApiError("query must be a non-empty string", param="query")
    return RerankRequest(
        model=fields.model_name(body),
        query=query,
        documents=_documents(body.get("documents")),
        top_n=fields.field(body, "top_n", int, low=1),
        return_documents=fields.field(body, "return_documents", bool, True),
        instruction=_instruction(body.get("instruction")),
    )


def _instruction(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ApiError("instruction must be a non-empty string", param="instruction")
    return value
