"""A cross-encoder reranker in the engine, without a server: which folders rerank, the
score's activation, and scores that do not depend on their batch."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from inference.engine.embedding.decoder_reranker import reranker_prompt
from inference.engine.embedding.embedder import InputRejected
from inference.engine.embedding.reranker import Reranker, load_reranker
from inference.protocol.embedding_folder import RERANK, embedding_support
from inference.protocol.embeddings import RerankCall
from tests.embedding_models import (
    build_bert_cross_encoder_folder,
    build_qwen3_reranker_folders,
    build_xlmr_cross_encoder_folder,
)

QUERY = "What is the capital of France?"
DOCUMENTS = ["The cat sat on the mat", "Paris", "a dog", "Paris is the capital of France."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_bert_cross_encoder_folder(tmp_path_factory.mktemp("rerank") / "bert")


def reranker(folder, batch_tokens: int = 16384) -> Reranker:
    spec = embedding_support(folder).spec
    return Reranker(load_reranker(folder, spec), name="ce", batch_tokens=batch_tokens)


def scores(ranker: Reranker, documents: list[str], instruction: str | None = None) -> np.ndarray:
    call = RerankCall(query=QUERY, documents=documents, instruction=instruction)
    return ranker.vectors(ranker.inputs_of(call))[:, 0]


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
        ({"model_type": "deberta-v2"}, "served for bert, xlm_roberta and the decoders"),
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


# XLM-R (bge-reranker's family) and Qwen3-Reranker's two forms.


@pytest.fixture(scope="module")
def xlmr_folder(tmp_path_factory):
    return build_xlmr_cross_encoder_folder(tmp_path_factory.mktemp("rerank") / "xlmr")


@pytest.fixture(scope="module")
def qwen3_folders(tmp_path_factory, model_folder):
    return build_qwen3_reranker_folders(tmp_path_factory.mktemp("qwen3-rerank"), model_folder)


def test_xlm_r_scores_are_its_head_over_the_first_token(xlmr_folder):
    """The reference: mlx-embeddings' encoder and transformers' head, computed by hand."""
    import mlx.core as mx
    from mlx_embeddings.models import xlm_roberta
    from transformers import AutoTokenizer

    assert embedding_support(xlmr_folder).spec.model_type == "xlm_roberta"
    config = json.loads((xlmr_folder / "config.json").read_text())
    weights = mx.load(str(xlmr_folder / "model.safetensors"))
    encoder = xlm_roberta.Model(
        xlm_roberta.ModelArgs.from_dict({**config, "add_pooling_layer": False})
    )
    encoder.load_weights(
        [(k[len("roberta.") :], v) for k, v in weights.items() if k.startswith("roberta.")]
    )
    encoder.eval()  # no dropout
    tokenizer = AutoTokenizer.from_pretrained(str(xlmr_folder))
    expected = []
    for document in DOCUMENTS:
        ids = tokenizer(QUERY, document)["input_ids"]
        assert ids[0] == 0 and ids.count(2) == 3  # <s> q </s></s> d </s>
        first = np.array(encoder(mx.array([ids])).last_hidden_state[0, 0])
        dense = np.tanh(np.array(weights["classifier.dense.weight"]) @ first
                        + np.array(weights["classifier.dense.bias"]))  # fmt: skip
        logit = np.array(weights["classifier.out_proj.weight"])[0] @ dense
        expected.append(
            1 / (1 + np.exp(-(logit + np.array(weights["classifier.out_proj.bias"])[0])))
        )
    got = scores(reranker(xlmr_folder, batch_tokens=64), DOCUMENTS)
    assert np.abs(got - np.array(expected)).max() < 1e-4
    assert np.ptp(got) > 1e-2


def test_qwen3_reranker_scores_are_its_own_yes_probability(qwen3_folders):
    """P(yes) over {yes, no} from mlx-lm's own logits at the prompt's last token."""
    import mlx.core as mx
    from mlx_lm import load

    original, _ = qwen3_folders
    spec = embedding_support(original).spec
    assert (spec.backend, spec.classifier_tokens) == ("decoder", ("no", "yes"))
    model, tokenizer = load(str(original))
    yes, no = tokenizer.convert_tokens_to_ids(["yes", "no"])
    expected = []
    for document in DOCUMENTS:
        ids = tokenizer.encode(reranker_prompt(QUERY, document))
        logits = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))
        expected.append(1 / (1 + np.exp(logits[no] - logits[yes])))
    got = scores(reranker(original, batch_tokens=256), DOCUMENTS)  # padded batches
    assert np.abs(got - np.array(expected)).max() < 1e-4
    assert list(np.argsort(got)) == list(np.argsort(expected)) and np.ptp(got) > 1e-3


def test_the_sequence_classification_conversion_scores_as_the_original(qwen3_folders):
    original, converted = qwen3_folders
    spec = embedding_support(converted).spec
    assert (spec.backend, spec.task, spec.classifier_tokens) == ("decoder", RERANK, None)
    assert (
        np.abs(scores(reranker(converted), DOCUMENTS) - scores(reranker(original), DOCUMENTS)).max()
        < 1e-4
    )


def test_a_decoder_reranker_reads_the_instruction(qwen3_folders):
    ranker = reranker(qwen3_folders[0])
    default = scores(ranker, DOCUMENTS)
    assert np.array_equal(default, scores(ranker, DOCUMENTS, instruction=None))
    assert np.abs(scores(ranker, DOCUMENTS, instruction="Find code") - default).max() > 1e-5


def test_a_chat_qwen3_is_no_reranker(qwen3_folders, tmp_path):
    config = json.loads((qwen3_folders[0] / "config.json").read_text())
    del config["classifier_from_token"]
    copy = edited_copy(qwen3_folders[0], tmp_path)
    (copy / "config.json").write_text(json.dumps(config))
    assert embedding_support(copy).capabilities == ("chat",)
    bad = edited_copy(qwen3_folders[0], tmp_path / "bad", classifier_from_token=["yes"])
    assert "two tokens" in embedding_support(bad).problem
