"""The serve path of /v1/embeddings: the model checked, the call sent to its worker, the
one answer awaited (ask_worker, which /v1/rerank shares: rerank.py).

Everything that needs no tokenizer is checked here, in the web process (the model can
embed, `dimensions` fits its vectors); the worker tokenizes and checks each input's length.
As for generations (serve.py), a call the worker had not answered when something outside
killed it (SIGKILL, SIGTERM) goes once more to the restarted worker: embedding it again
changes nothing.
"""

from __future__ import annotations

import logging

from labsettings import lab_settings

from .api.embeddings_request import EmbeddingsCall
from .engines import model_record, open_generation
from .errors import ApiError
from .model_registry import model_embedding_support
from .models import LanguageModel
from .protocol.embedding_folder import RERANK
from .protocol.embeddings import EmbedCall, Embedded
from .protocol.wire import WorkerCall
from .workers.streams import Rejected, WorkerStopped

log = logging.getLogger(__name__)


def _cannot_embed(name: str, problem: str | None) -> ApiError:
    reason = problem or "it is a chat model (its folder has no sentence-transformers pooling)"
    return ApiError(
        f"The model '{name}' cannot create embeddings: {reason}",
        param="model",
        code="model_not_supported",
    )


def _check_model(record: LanguageModel, call: EmbeddingsCall) -> None:
    """The model embeds, in vectors at least `dimensions` long; a 400 otherwise."""
    support = model_embedding_support(record)
    if support.spec is None:
        raise _cannot_embed(record.name, support.problem)
    if support.spec.task == RERANK:
        raise _cannot_embed(record.name, "it is a reranker (it serves /v1/rerank only)")
    if call.dimensions is not None and call.dimensions > support.spec.dimension:
        raise ApiError(
            f"dimensions must be at most {support.spec.dimension}, the length of "
            f"{record.name}'s vectors",
            param="dimensions",
        )


async def embed(call: EmbeddingsCall) -> tuple[LanguageModel, Embedded]:
    """The model and its worker's vectors for `call`.

    Raises ApiError (a client error, or the worker's failure as a 500), EngineUnavailable
    or WorkerStopped (the caller answers 502).
    """
    record = await model_record(call.model)
    _check_model(record, call)
    worker_call = EmbedCall(
        texts=call.texts,
        token_ids=call.token_ids,
        dimensions=call.dimensions,
        max_input_tokens=lab_settings.embedding_max_input_tokens,
    )
    return record, await ask_worker(record, worker_call)


async def ask_worker(record: LanguageModel, call: WorkerCall, *, again: bool = True):
    """The worker's one answer to `call` (Embedded, or Reranked for a RerankCall)."""
    stream = await open_generation(record, call)
    try:
        return await stream.reply()
    except WorkerStopped as error:
        if not (again and error.killed_from_outside):
            raise
        log.warning("%s: worker killed before it answered; sending the call again", record.name)
    except Rejected as error:
        rejected = error.rejected
        raise ApiError(rejected.message, param=rejected.param, code=rejected.code) from None
    except RuntimeError as error:  # the worker failed on a valid call
        raise ApiError(str(error), status=500, type="server_error") from None
    finally:
        stream.close()  # cancels the call in the worker if the client left first
    return await ask_worker(record, call, again=False)
