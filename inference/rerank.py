"""The serve path of /v1/rerank: the model checked (a reranker), the query and documents
sent to its worker as one call, its scores awaited (embeddings.ask_worker: a call the
worker had not answered when it was killed from outside goes once more)."""

from __future__ import annotations

from labsettings import lab_settings

from .api.rerank_request import RerankRequest
from .embeddings import ask_worker
from .engines import model_record
from .errors import ApiError
from .model_registry import model_embedding_support
from .models import LanguageModel
from .protocol.embedding_folder import RERANK
from .protocol.embeddings import RerankCall, Reranked


def _check_model(record: LanguageModel) -> None:
    """The model is a cross-encoder reranker; a 400 naming it otherwise."""
    support = model_embedding_support(record)
    if support.spec is not None and support.spec.task == RERANK:
        return
    if support.spec is not None:
        reason = "it is an embedding model (it serves /v1/embeddings only)"
    else:
        reason = support.problem or "it is a chat model, not a reranker"
    raise ApiError(
        f"The model '{record.name}' cannot rerank: {reason}",
        param="model",
        code="model_not_supported",
    )


async def rerank(request: RerankRequest) -> tuple[LanguageModel, Reranked]:
    """The model and its worker's score for each document, in the documents' order.

    Raises ApiError, EngineUnavailable or WorkerStopped, as embeddings.embed does.
    """
    record = await model_record(request.model)
    _check_model(record)
    call = RerankCall(
        query=request.query,
        documents=request.documents,
        max_input_tokens=lab_settings.embedding_max_input_tokens,
        instruction=request.instruction,
    )
    return record, await ask_worker(record, call)
