"""POST /v1/rerank through httpx (the openai SDK has none), on the session's live server and
a real worker, with a tiny random-weight BERT cross-encoder (tests/embedding_models.py).

The expected scores are the model's own, computed here pair by pair: transformers'
tokenizer on (query, document), mlx-embeddings' BERT, and the classifier head in numpy,
then the sigmoid sentence-transformers' CrossEncoder applies to a 1-label model.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import openai
import pytest

from tests.conftest import DEFAULT_MODEL
from tests.embedding_models import BERT, QWEN3_RERANKER, RERANKER

QUERY = "What is the capital of France?"
DOCUMENTS = [
    "The cat sat on the mat",
    "Paris",
    "a dog",
    "Paris is the capital of France, on the Seine.",
    "capital",
]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def reference(embedding_models) -> tuple[np.ndarray, int]:
    """The model's own score for each document alone, and the pairs' tokens."""
    from mlx_embeddings.models import bert
    from transformers import AutoTokenizer

    folder = embedding_models[RERANKER]
    config = json.loads((folder / "config.json").read_text())
    weights = mx.load(str(folder / "model.safetensors"))
    encoder = bert.Model(bert.ModelArgs.from_dict(config))
    encoder.load_weights(
        [(k.removeprefix("bert."), v) for k, v in weights.items() if k.startswith("bert.")]
    )
    encoder.eval()  # no dropout: mlx modules train by default
    head_w = np.array(weights["classifier.weight"])
    head_b = np.array(weights["classifier.bias"])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    scores, tokens = [], 0
    for document in DOCUMENTS:
        pair = tokenizer(QUERY, document)
        tokens += len(pair["input_ids"])
        ids, types = mx.array([pair["input_ids"]]), mx.array([pair["token_type_ids"]])
        pooled = np.array(encoder(ids, token_type_ids=types).pooler_output)
        logit = (pooled @ head_w.T + head_b)[0, 0]
        scores.append(1 / (1 + np.exp(-logit)))
    return np.array(scores), tokens


def rerank(http, **body):
    return http.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, **body})


def test_models_list_the_reranker(http, embedding_models):
    listed = {m["id"]: m["capabilities"] for m in http.get("/v1/models").json()["data"]}
    assert listed[RERANKER] == ["rerank"]
    assert listed[BERT] == ["embeddings"] and listed[DEFAULT_MODEL] == ["chat"]
    assert http.get(f"/v1/models/{RERANKER}").json()["capabilities"] == ["rerank"]


def test_results_are_the_models_scores_best_first(http, reference):
    expected, tokens = reference
    response = rerank(http, documents=DOCUMENTS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == RERANKER and body["id"].startswith("rerank-")
    results = body["results"]
    assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable"))
    got = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
    assert np.abs(got - expected).max() < TOLERANCE
    # Documents come back unless asked not to (vLLM's and Jina's default).
    assert [r["document"]["text"] for r in results] == [DOCUMENTS[r["index"]] for r in results]
    assert body["usage"] == {"total_tokens": tokens}


def test_top_n_keeps_the_best(http, reference):
    expected, _ = reference
    results = rerank(http, documents=DOCUMENTS, top_n=2).json()["results"]
    assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable")[:2])
    # More than there are documents: all of them.
    assert len(rerank(http, documents=DOCUMENTS, top_n=50).json()["results"]) == len(DOCUMENTS)


def test_return_documents_false_leaves_them_out(http, embedding_models):
    results = rerank(http, documents=DOCUMENTS, return_documents=False).json()["results"]
    assert len(results) == len(DOCUMENTS)
    assert all(set(r) == {"index", "relevance_score"} for r in results)


def test_documents_as_objects_score_as_strings(http, embedding_models):
    plain = rerank(http, documents=DOCUMENTS).json()["results"]
    objects = rerank(http, documents=[{"text": d} for d in DOCUMENTS]).json()["results"]
    assert [r["index"] for r in objects] == [r["index"] for r in plain]
    assert all(
        abs(a["relevance_score"] - b["relevance_score"]) < TOLERANCE
        for a, b in zip(objects, plain, strict=True)
    )
    assert objects[0]["document"] == {"text": DOCUMENTS[objects[0]["index"]]}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"query": None, "documents": ["a"]}, "query", "non-empty string"),
        ({"query": "", "documents": ["a"]}, "query", "non-empty string"),
        ({"documents": []}, "documents", "non-empty array"),
        ({"documents": "a"}, "documents", "non-empty array"),
        ({"documents": ["a", ""]}, "documents", "documents[1]"),
        ({"documents": [{"text": 1}]}, "documents", "documents[0]"),
        ({"documents": ["a"] * 2049}, "documents", "at most 2048"),
        ({"documents": ["a"], "top_n": 0}, "top_n", "at least 1"),
        ({"documents": ["a"], "top_n": "2"}, "top_n", "type int"),
        ({"documents": ["a"], "return_documents": "yes"}, "return_documents", "type bool"),
        ({"documents": ["a dog", "cat " * 100]}, "documents", "documents[1] with the query"),
    ],
)
def test_invalid_bodies_are_400s_naming_the_field(http, embedding_models, body, param, says):
    response = http.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]


@pytest.mark.parametrize("model", [BERT, DEFAULT_MODEL])
def test_a_rerank_request_to_a_model_that_cannot_rerank_is_a_400(http, embedding_models, model):
    response = http.post("/v1/rerank", json={"model": model, "query": "q", "documents": ["d"]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"'{model}' cannot rerank" in error["message"]
    assert (error["param"], error["code"]) == ("model", "model_not_supported")


def test_an_unknown_model_is_a_404(http):
    response = http.post("/v1/rerank", json={"model": "nope", "query": "q", "documents": ["d"]})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_an_embeddings_request_to_the_reranker_is_a_400(client, embedding_models):
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=RERANKER, input="Hi")
    assert (
        f"'{RERANKER}' cannot create embeddings: it is a reranker" in (raised.value.body["message"])
    )
    assert raised.value.body["param"] == "model"


def test_a_chat_request_to_the_reranker_is_a_400(client, embedding_models):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=RERANKER, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
        )
    assert f"'{RERANKER}' is a reranker" in raised.value.body["message"]
    assert raised.value.body["param"] == "model"


def test_a_qwen3_reranker_ranks_by_its_own_yes_probability(http, embedding_models):
    """Qwen3-Reranker's original form, served: each score is P(yes) from mlx-lm's own
    logits over the model card's prompt, with the request's instruction in it."""
    from mlx_lm import load

    from inference.engine.embedding.decoder_reranker import reranker_prompt

    model, tokenizer = load(str(embedding_models[QWEN3_RERANKER]))
    yes, no = tokenizer.convert_tokens_to_ids(["yes", "no"])
    for instruction in (None, "Find the sentence about cities"):
        expected = []
        for document in DOCUMENTS:
            ids = tokenizer.encode(reranker_prompt(QUERY, document, instruction))
            logits = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))
            expected.append(1 / (1 + np.exp(logits[no] - logits[yes])))
        body = {"instruction": instruction} if instruction else {}
        response = rerank(http, model=QWEN3_RERANKER, query=QUERY, documents=DOCUMENTS, **body)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [r["index"] for r in results] == list(np.argsort(expected)[::-1])
        got = np.array([r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])])
        assert np.abs(got - np.array(expected)).max() < TOLERANCE


def test_a_bad_instruction_is_a_400(http, embedding_models):
    response = rerank(http, model=QWEN3_RERANKER, query=QUERY, documents=["a"], instruction=3)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "instruction"
