"""Embedding models in the engine, without a server: which folders embed and how, the
length buckets, the pooling, and vectors that do not depend on their batch."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest

from inference.engine.embedding.batching import bucket_of, plan_batches
from inference.engine.embedding.embedder import Embedder, InputRejected
from inference.engine.embedding.models import load_embedding_model
from inference.engine.embedding.pooling import finish, pool
from inference.protocol.embedding_folder import (
    CHAT,
    DECODER,
    EMBEDDINGS,
    ENCODER,
    MODEL_POOLING,
    embedding_support,
)
from inference.protocol.embeddings import EmbedCall
from tests.architecture_models import DEFAULT_TOKENIZER_DIR
from tests.embedding_models import (
    POOLING_MODULE,
    build_bert_folder,
    build_decoder_folder,
    write_sentence_transformers_files,
)

TEXTS = [
    "The cat sat on the mat",
    "Paris",
    "a dog",
    "What is the capital of France? It is Paris, the capital of France, on the Seine.",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-models")
    return {
        "bert": build_bert_folder(root / "bert"),
        "qwen3": build_decoder_folder(
            root / "qwen3", DEFAULT_TOKENIZER_DIR, model_type="qwen3",
            pooling="lasttoken", normalize=True,
        ),
        "llama": build_decoder_folder(
            root / "llama", DEFAULT_TOKENIZER_DIR, model_type="llama",
            pooling="mean_tokens", normalize=False,
        ),
    }  # fmt: skip


def embedder(folder, batch_tokens: int = 16384) -> Embedder:
    spec = embedding_support(folder).spec
    return Embedder(load_embedding_model(folder, spec), name=folder.name, batch_tokens=batch_tokens)


# -- which folders embed ------------------------------------------------------------------


def test_an_encoder_embeds_by_its_architecture_with_its_own_pooling(folders):
    support = embedding_support(folders["bert"])
    assert support.capabilities == (EMBEDDINGS,)
    spec = support.spec
    assert (spec.backend, spec.pooling, spec.normalize, spec.dimension) == (
        ENCODER, MODEL_POOLING, True, 32,
    )  # fmt: skip


def test_a_decoder_embeds_as_its_sentence_transformers_files_say(folders):
    qwen3, llama = (
        embedding_support(folders["qwen3"]).spec,
        embedding_support(folders["llama"]).spec,
    )
    assert (qwen3.backend, qwen3.pooling, qwen3.normalize, qwen3.dimension) == (
        DECODER, "last", True, 64,
    )  # fmt: skip
    assert (llama.pooling, llama.normalize) == ("mean", False)


def test_a_decoder_without_pooling_files_is_a_chat_model(model_folder):
    support = embedding_support(model_folder)
    assert support.spec is None and support.problem is None
    assert support.capabilities == (CHAT,)


def test_embedding_files_asking_for_what_is_not_served_say_why(folders, tmp_path):
    folder = tmp_path / "max-pooled"
    shutil.copytree(folders["llama"], folder)
    write_sentence_transformers_files(folder, pooling="max_tokens", normalize=False)
    support = embedding_support(folder)
    assert support.capabilities == ()
    assert "pooling_mode_max_tokens" in support.problem

    modules = [
        POOLING_MODULE,
        {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    assert "Dense" in embedding_support(folder).problem


# -- length buckets and pooling -------------------------------------------------------------


def test_batches_follow_length_buckets_and_the_token_budget():
    lengths = [3, 40, 5, 17, 16, 33, 200]
    batches = plan_batches(lengths, max_tokens=64)
    assert sorted(i for b in batches for i in b.indices) == list(range(len(lengths)))
    for batch in batches:
        members = [lengths[i] for i in batch.indices]
        assert batch.length == max(members)
        assert len({bucket_of(n) for n in members}) == 1
        assert batch.padded_tokens <= 64 or len(members) == 1
    assert [[lengths[i] for i in b.indices] for b in batches] == [
        [3, 5, 16],
        [17],
        [33],
        [40],
        [200],
    ]


def test_pooling_ignores_padding():
    hidden = mx.array(np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3))
    mask = mx.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    rows = np.array(hidden)
    np.testing.assert_allclose(np.array(pool(hidden, mask, "mean"))[1], rows[1, :2].mean(axis=0))
    np.testing.assert_allclose(np.array(pool(hidden, mask, "last"))[1], rows[1, 1])
    np.testing.assert_allclose(np.array(pool(hidden, mask, "cls"))[1], rows[1, 0])


def test_finish_truncates_then_normalizes_as_little_endian_float32():
    vectors = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    (packed,) = finish(vectors, dimensions=2, normalize=True)
    np.testing.assert_allclose(np.frombuffer(packed, "<f4"), [0.6, 0.8], rtol=1e-6)
    (raw,) = finish(vectors, dimensions=None, normalize=False)
    assert np.frombuffer(raw, "<f4").tolist() == [3.0, 4.0, 12.0]


# -- vectors ----------------------------------------------------------------------------------


def test_encoder_vectors_are_mlx_embeddings_own(folders):
    model = embedder(folders["bert"])
    vectors = model.vectors(model.inputs_of(EmbedCall(texts=TEXTS)))
    loaded = model.model
    for text, vector in zip(TEXTS, vectors, strict=True):
        ids = mx.array([loaded.tokenizer.encode(text)])
        expected = np.array(loaded.model(ids).text_embeds[0])
        np.testing.assert_allclose(vector, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["bert", "qwen3", "llama"])
def test_a_vector_is_the_same_alone_or_in_a_batch(folders, name):
    # A small budget puts the texts in several passes of several sizes.
    model = embedder(folders[name], batch_tokens=48)
    inputs = model.inputs_of(EmbedCall(texts=TEXTS + ["a cat", "the dog sat on the mat"]))
    together = model.vectors(inputs)
    passes = model.stats.forward_passes
    alone = np.stack([model.vectors([tokens])[0] for tokens in inputs])
    assert np.abs(together - alone).max() < 1e-4
    assert 1 < passes < len(inputs)  # batched, in passes of several sizes


def test_inputs_beyond_the_context_or_the_vocabulary_are_refused(folders):
    model = embedder(folders["bert"])  # a context of 64 tokens
    with pytest.raises(InputRejected, match=r"input\[1\] is \d+ tokens; .* at most 64"):
        model.inputs_of(EmbedCall(texts=["short", "word " * 100]))
    with pytest.raises(InputRejected, match="at most 5 tokens"):
        model.inputs_of(EmbedCall(texts=["the cat sat on the mat"], max_input_tokens=5))
    with pytest.raises(InputRejected, match="vocabulary"):
        model.inputs_of(EmbedCall(token_ids=[[2, 10_000]]))
