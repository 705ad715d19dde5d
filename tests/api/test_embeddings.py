"""POST /v1/embeddings through the official `openai` SDK, on the session's live server and
real model workers, with tiny random-weight embedding models (tests/embedding_models.py):
a BERT encoder that mlx-embeddings pools, and two mlx-lm decoders pooled as their
sentence-transformers files say (last token and Normalize; mean tokens alone).

The tests are ordered by model, so each model's worker loads once beside the default one.
The models are registered by tests/api/conftest.py's `embedding_models`, which
test_rerank.py shares.
"""

from __future__ import annotations

import base64
import time

import mlx.core as mx
import numpy as np
import openai
import pytest

from tests.conftest import DEFAULT_MODEL
from tests.embedding_models import BERT, LLAMA, QWEN3

TEXTS = [
    "The cat sat on the mat",
    "Paris",
    "a dog",
    "What is the capital of France? It is Paris, the capital of France, on the Seine.",
]
TOLERANCE = 1e-4


def vectors(response) -> np.ndarray:
    assert [item.index for item in response.data] == list(range(len(response.data)))
    return np.array([item.embedding for item in response.data], dtype=np.float32)


def create(client, model: str, texts, **options) -> np.ndarray:
    return vectors(
        client.embeddings.create(model=model, input=texts, encoding_format="float", **options)
    )


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() < TOLERANCE


# -- the registry -------------------------------------------------------------------------------


def test_models_list_their_capabilities(http, embedding_models):
    listed = {m["id"]: m["capabilities"] for m in http.get("/v1/models").json()["data"]}
    assert listed[DEFAULT_MODEL] == ["chat"]
    assert listed[BERT] == listed[QWEN3] == listed[LLAMA] == ["embeddings"]
    assert http.get(f"/v1/models/{QWEN3}").json()["capabilities"] == ["embeddings"]


def test_the_lab_s_registry_lists_them_too(staff_http, embedding_models):
    # The models page marks them, and the chat pickers leave them out (static/lab/api.js).
    registry = staff_http.get("/api/models").json()["results"]
    listed = {model["name"]: model["capabilities"] for model in registry}
    assert listed[DEFAULT_MODEL] == ["chat"]
    assert listed[BERT] == listed[QWEN3] == ["embeddings"]


# -- the 400s and the 404 -------------------------------------------------------------------------


def test_a_chat_request_to_an_embedding_model_is_a_400_naming_it(client, embedding_models):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=BERT, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
        )
    assert f"'{BERT}' is an embedding model" in raised.value.body["message"]
    assert raised.value.body["param"] == "model"


def test_an_embeddings_request_to_a_chat_model_is_a_400_naming_it(client, embedding_models):
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=DEFAULT_MODEL, input="Hi")
    assert f"'{DEFAULT_MODEL}' cannot create embeddings" in raised.value.body["message"]
    assert raised.value.body["code"] == "model_not_supported"


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError) as raised:
        client.embeddings.create(model="no-such-model", input="Hi")
    assert raised.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": ""}, "input", "empty string"),
        ({"input": []}, "input", "non-empty"),
        ({"input": ["a", ""]}, "input", "input[1] is an empty string"),
        ({"input": ["a", 1]}, "input", "non-empty"),
        ({"input": [[1, 2], []]}, "input", "input[1] must be a non-empty array"),
        ({"input": [-1]}, "input", "token ids"),
        ({"input": ["a"] * 2049}, "input", "at most 2048"),
        ({"input": list(range(8193))}, "input", "at most 8192"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format", "'float' or 'base64'"),
        ({"input": "a", "dimensions": 0}, "dimensions", "at least 1"),
        ({"input": "a", "dimensions": 33}, "dimensions", "at most 32"),
    ],
)
def test_invalid_bodies_are_400s_naming_the_field(http, embedding_models, body, param, says):
    response = http.post("/v1/embeddings", json={"model": BERT, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]


# -- the encoder ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert_reference(embedding_models):
    """mlx-embeddings' own vectors and token counts for TEXTS."""
    from mlx_embeddings import load

    model, tokenizer = load(str(embedding_models[BERT]))
    ids = [tokenizer.encode(text) for text in TEXTS]
    own = np.stack([np.array(model(mx.array([tokens])).text_embeds[0]) for tokens in ids])
    return own, ids


def test_encoder_floats_are_mlx_embeddings_own(client, bert_reference):
    own, ids = bert_reference
    response = client.embeddings.create(model=BERT, input=TEXTS, encoding_format="float")
    assert response.model == BERT and response.object == "list"
    assert response.data[0].object == "embedding"
    assert_close(vectors(response), own)
    token_count = sum(len(tokens) for tokens in ids)
    assert response.usage.prompt_tokens == response.usage.total_tokens == token_count


def test_base64_is_little_endian_float32(client, http, bert_reference):
    own, _ = bert_reference
    raw = http.post(
        "/v1/embeddings", json={"model": BERT, "input": TEXTS, "encoding_format": "base64"}
    ).json()
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in raw["data"]]
    )
    assert_close(decoded, own)
    # The SDK asks for base64 itself when no format is given, and decodes it.
    assert_close(vectors(client.embeddings.create(model=BERT, input=TEXTS)), own)


def test_encoder_vectors_are_the_same_alone_or_batched(client):
    together = create(client, BERT, TEXTS)
    alone = np.concatenate([create(client, BERT, text) for text in TEXTS])
    assert_close(together, alone)


def test_stats_show_inputs_batched_into_few_passes(client, staff_http):
    before = staff_http.get("/stats").json()["models"][BERT]["embeddings"]
    create(client, BERT, TEXTS * 8)
    after = staff_http.get("/stats").json()["models"][BERT]["embeddings"]
    assert after["inputs"] - before["inputs"] == len(TEXTS) * 8
    # Two length buckets (up to 16 tokens, and the long text's): two passes, not 32.
    assert after["forward_passes"] - before["forward_passes"] == 2
    assert (after["backend"], after["pooling"]) == ("encoder", "model")


def test_dimensions_truncate_then_renormalize(client, bert_reference):
    own, _ = bert_reference
    short = create(client, BERT, TEXTS, dimensions=8)
    expected = own[:, :8] / np.linalg.norm(own[:, :8], axis=1, keepdims=True)
    assert_close(short, expected)


def test_token_ids_embed_as_their_text(client, bert_reference):
    own, ids = bert_reference
    assert_close(create(client, BERT, ids), own)
    assert_close(create(client, BERT, ids[0]), own[:1])


def test_an_input_beyond_the_model_context_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=BERT, input=["a dog", "cat " * 100])
    assert raised.value.body["code"] == "context_length_exceeded"
    assert (
        "input[1] is 102 tokens" in raised.value.body["message"]
        and "at most 64" in raised.value.body["message"]
    )


def test_a_token_id_outside_the_vocabulary_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="vocabulary"):
        client.embeddings.create(model=BERT, input=[[2, 100_000, 3]])


# -- the decoders -----------------------------------------------------------------------------------


def decoder_reference(folder, pooling: str) -> tuple[np.ndarray, int]:
    """mlx-lm's backbone on each text alone, pooled here; and the tokens counted."""
    from mlx_lm import load

    model, tokenizer = load(str(folder))
    rows, count = [], 0
    for text in TEXTS:
        tokens = tokenizer.encode(text)
        count += len(tokens)
        hidden = np.array(model.model(mx.array([tokens]))[0].astype(mx.float32))
        rows.append(hidden[-1] if pooling == "last" else hidden.mean(axis=0))
    return np.stack(rows), count


def test_last_token_pooling_with_normalize(client, embedding_models):
    expected, count = decoder_reference(embedding_models[QWEN3], "last")
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    response = client.embeddings.create(model=QWEN3, input=TEXTS, encoding_format="float")
    assert_close(vectors(response), expected)
    assert response.usage.prompt_tokens == count
    alone = np.concatenate([create(client, QWEN3, text) for text in TEXTS])
    assert_close(alone, expected)


def test_mean_pooling_without_normalize(client, embedding_models):
    expected, _ = decoder_reference(embedding_models[LLAMA], "mean")
    got = create(client, LLAMA, TEXTS)
    assert_close(got, expected)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)  # no Normalize module: raw
    # Truncated only: a model that does not normalize is not normalized by `dimensions`.
    assert_close(create(client, LLAMA, TEXTS, dimensions=16), expected[:, :16])


def test_an_embeddings_call_is_in_the_usage_record(client, staff_http, embedding_models):
    def used() -> dict:
        rows = staff_http.get("/api/usage?group_by=model").json()["data"]
        return next((r for r in rows if r["group"] == BERT), {"requests": 0, "prompt_tokens": 0})

    before = used()
    answer = client.embeddings.create(model=BERT, input=["one text", "and another one"])
    deadline = time.monotonic() + 5
    while used()["requests"] == before["requests"] and time.monotonic() < deadline:
        time.sleep(0.05)
    after = used()
    assert after["requests"] == before["requests"] + 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == answer.usage.prompt_tokens > 0
