"""A worker's scores as the /v1/rerank answer: best first, cut to top_n."""

from __future__ import annotations

import uuid

from ..protocol.embeddings import Reranked
from .rerank_request import RerankRequest


def rerank_body(reranked: Reranked, request: RerankRequest, *, model: str) -> dict:
    """`results` sorted by score, descending (ties keep the documents' order), each with
    its document's index and, unless return_documents is false, its text."""
    order = sorted(range(len(reranked.scores)), key=lambda i: -reranked.scores[i])
    results = []
    for index in order[: request.top_n]:
        result = {"index": index, "relevance_score": reranked.scores[index]}
        if request.return_documents:
            result["document"] = {"text": request.documents[index]}
        results.append(result)
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": model,
        "results": results,
        "usage": {"total_tokens": reranked.total_tokens},
    }
