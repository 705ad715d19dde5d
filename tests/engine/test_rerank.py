"""A cross-encoder reranker in the engine, without a server: which folders rerank, the
score's activation, and scores that do not depend on their batch."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from inference.engine.embedding.embedder import InputRejected
from inference.engine.embedding.reranker import Reranker, load_cross_encoder
from inference.protocol.embedding_folder import RERANK, embedding_support
from inference.protocol.embeddings import RerankCall
from tests.embedding_models import build_bert_cross_encoder_folder

QUERY = "What is the capital of France?"
DOCUMENTS = ["The cat sat on the mat", "Paris", "a dog", "Paris is the capital of France."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_bert_cross_encoder_folder(tmp_path_factory.mktemp("rerank") / "bert")


def reranker(folder, batch_tokens: int = 16384) -> Reranker:
    spec = embedding_support(folder).spec
    return Reranker(load_cross_encoder(folder, spec), name="ce", batch_tokens=batch_tokens)


def scores(ranker: Reranker, documents: list[str]) -> np.ndarray:
    pairs = ranker.inputs_of(RerankCall(query=QUERY, documents=documents))
    return ranker.vectors(pairs)[:, 0]


def edited_copy(folder, tmp_path, **config) -> object:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "config.json").write_text(
        json.dumps({**json.loads((folder / "config.json").read_text()), **config})
    )
    return copy


def test_a_one_label_sequence_classifier_reranks_with_a_sigmoid(folder):
    support = embedding_support(folder)
    assert support.capabilities == (RERANK,)
    assert (support.spec.model_type, support.spec.score_activation) == ("bert", "sigmoid")


def test_a_config_naming_the_identity_scores_the_raw_logit(folder, tmp_path):
    identity = "torch.nn.modules.linear.Identity"
    copy = edited_copy(folder, tmp_path, sentence_transformers={"activation_fn": identity})
    assert embedding_support(copy).spec.score_activation == "identity"
    logits = scores(reranker(copy), DOCUMENTS)
    assert np.allclose(1 / (1 + np.exp(-logits)), scores(reranker(folder), DOCUMENTS), atol=1e-5)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"id2label": {"0": "NEG", "1": "POS"}}, "2 labels"),
        ({"model_type": "xlm-roberta"}, "rerankers are served for bert only"),
    ],
)
def test_classifiers_not_served_say_why(folder, tmp_path, config, says):
    support = embedding_support(edited_copy(folder, tmp_path, **config))
    assert support.capabilities == () and says in support.problem


def test_scores_are_the_same_alone_or_in_a_batch(folder):
    ranker = reranker(folder, batch_tokens=64)  # several passes, padded
    together = scores(ranker, DOCUMENTS * 3)
    alone = np.concatenate([scores(ranker, [d]) for d in DOCUMENTS])
    assert np.abs(together - np.tile(alone, 3)).max() < 1e-5
    assert ranker.stats.forward_passes > 1 + len(DOCUMENTS)
    assert np.ptp(alone) > 1e-2  # distinct enough that an order is meaningful


def test_a_pair_beyond_the_context_is_refused(folder):
    with pytest.raises(InputRejected, match=r"documents\[1\] with the query is \d+ tokens"):
        reranker(folder).inputs_of(RerankCall(query=QUERY, documents=["a", "cat " * 100]))
