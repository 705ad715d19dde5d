"""Tiny random-weight embedding models built from real configs, for the embedding tests.

- a BERT encoder (all-MiniLM-L6-v2's config, shrunk), saved as mlx-embeddings loads it,
  with a WordPiece tokenizer of its own (the `tokenizers` library): no sentence-transformers
  files, so it is an embedding model by its architecture and mlx-embeddings pools it;
- decoders (mlx-lm's qwen3 and llama, tests/architecture_models.py) with the default
  model's tokenizer and sentence-transformers' modules.json and 1_Pooling/config.json:
  Qwen3-Embedding's last-token pooling and Normalize module, or mean pooling alone;
- a BERT cross-encoder reranker (ms-marco-MiniLM-L6-v2's config shape, shrunk): a
  BertForSequenceClassification of one label, its weights named as transformers saves them
  (`bert.*` and the `classifier.*` head), with the same WordPiece tokenizer;
- an XLM-R one (bge-reranker-base's shape, shrunk): `roberta.*` without a pooler and the
  `classifier.dense`/`classifier.out_proj` head, with a tokenizer joining pairs as XLM-R's
  does (`<s> q </s></s> d </s>`);
- decoder rerankers in Qwen3-Reranker's two forms: a qwen3 causal LM that config.json
  marks with vLLM's `classifier_from_token: ["no", "yes"]`, and its sequence-classification
  conversion (a `score` row of lm_head[yes] - lm_head[no], no lm_head).
"""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

# The names the API tests register them under (tests/api/conftest.py).
BERT, QWEN3, LLAMA = "tiny-bert-embed", "tiny-qwen3-last-embed", "tiny-llama-mean-embed"
RERANKER = "tiny-bert-rerank"
XLMR_RERANKER, QWEN3_RERANKER = "tiny-xlmr-rerank", "tiny-qwen3-rerank"

# all-MiniLM-L6-v2's config.json, at a width of 32 and 2 layers.
BERT_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "type_vocab_size": 2,
    "torch_dtype": "float32",
}
# A cross-encoder's config adds its head's labels: one, the relevance logit.
CROSS_ENCODER_CONFIG = {
    **BERT_CONFIG,
    "architectures": ["BertForSequenceClassification"],
    "id2label": {"0": "LABEL_0"},
    "label2id": {"LABEL_0": 0},
}
BERT_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT_WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "paris", "france", "capital"]

# sentence-transformers' files, as Qwen3-Embedding and mean-pooling models ship them.
TRANSFORMER_MODULE = {
    "idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer",
}  # fmt: skip
POOLING_MODULE = {
    "idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling",
}  # fmt: skip
NORMALIZE_MODULE = {
    "idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize",
}  # fmt: skip
POOLING_KEYS = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def bert_vocabulary() -> list[str]:
    letters = string.ascii_lowercase + string.digits
    pieces = [*letters, *(f"##{c}" for c in letters), *string.punctuation]
    return [*BERT_SPECIAL, *BERT_WORDS, *pieces]


def write_wordpiece_tokenizer(folder: Path, max_length: int) -> None:
    """A lower-casing BERT WordPiece tokenizer ([CLS] text [SEP]) and its transformers
    config, as a BERT checkpoint carries them."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate(bert_vocabulary())}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    special = {
        "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
        "sep_token": "[SEP]", "mask_token": "[MASK]",
    }  # fmt: skip
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "model_max_length": max_length,
        **special,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def build_bert_folder(folder: Path, seed: int = 0) -> Path:
    """A random-weight BERT saved as mlx-embeddings saves one (model.safetensors beside
    config.json), loaded back through mlx_embeddings.load to check it."""
    from mlx_embeddings.models import bert

    folder.mkdir(parents=True, exist_ok=True)
    config = {**BERT_CONFIG, "vocab_size": len(bert_vocabulary())}
    mx.random.seed(seed)
    model = bert.Model(bert.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_wordpiece_tokenizer(folder, config["max_position_embeddings"])
    return folder


def build_bert_cross_encoder_folder(folder: Path, seed: int = 2) -> Path:
    """A random-weight BertForSequenceClassification of one label: mlx-embeddings' BERT
    weights under transformers' `bert.` prefix, plus `classifier.weight` (1, hidden) and
    `classifier.bias` (1,), in one model.safetensors."""
    from mlx_embeddings.models import bert

    folder.mkdir(parents=True, exist_ok=True)
    config = {**CROSS_ENCODER_CONFIG, "vocab_size": len(bert_vocabulary())}
    mx.random.seed(seed)
    encoder = bert.Model(bert.ModelArgs.from_dict(config))
    weights = {f"bert.{key}": value for key, value in tree_flatten(encoder.parameters())}
    # Wide enough a head that random documents' scores differ well beyond float rounding.
    weights["classifier.weight"] = 4 * mx.random.normal((1, config["hidden_size"]))
    weights["classifier.bias"] = mx.array([0.1])
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_wordpiece_tokenizer(folder, config["max_position_embeddings"])
    return folder


def write_sentence_transformers_files(folder: Path, *, pooling: str, normalize: bool) -> None:
    """modules.json and 1_Pooling/config.json: `pooling` is a POOLING_KEYS name's mode
    (lasttoken, mean_tokens, cls_token...)."""
    config = json.loads((folder / "config.json").read_text())
    modules = [TRANSFORMER_MODULE, POOLING_MODULE, *([NORMALIZE_MODULE] if normalize else [])]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling_config = {
        "word_embedding_dimension": config["hidden_size"],
        **{key: key == f"pooling_mode_{pooling}" for key in POOLING_KEYS},
        "include_prompt": True,
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config, indent=2))
    if normalize:
        (folder / "2_Normalize").mkdir(exist_ok=True)


def build_decoder_folder(
    folder: Path, tokenizer_dir: Path, *, model_type: str, pooling: str, normalize: bool
) -> Path:
    """A tiny mlx-lm `model_type` with the default model's tokenizer, made an embedding
    model by sentence-transformers' files."""
    from tests.architecture_models import build_folder

    build_folder(model_type, folder, tokenizer_dir, seed=1)
    write_sentence_transformers_files(folder, pooling=pooling, normalize=normalize)
    return folder


# bge-reranker-base's config.json, at a width of 32 and 2 layers.
XLMR_CROSS_ENCODER_CONFIG = {
    **CROSS_ENCODER_CONFIG,
    "architectures": ["XLMRobertaForSequenceClassification"],
    "model_type": "xlm-roberta",
    "layer_norm_eps": 1e-05,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "type_vocab_size": 1,
    "max_position_embeddings": 66,  # XLM-R's positions start after the padding id
}
XLMR_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]


def write_xlmr_tokenizer(folder: Path, max_length: int) -> int:
    """A word-level tokenizer with XLM-R's special ids and its pair template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = [*BERT_WORDS, *string.ascii_lowercase, *string.punctuation, *string.digits]
    vocab = {token: index for index, token in enumerate([*XLMR_SPECIAL, *words])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
               "cls_token": "<s>", "pad_token": "<pad>", "unk_token": "<unk>"}  # fmt: skip
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
              **special}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    return len(vocab)


def build_xlmr_cross_encoder_folder(folder: Path, seed: int = 3) -> Path:
    """A random-weight XLMRobertaForSequenceClassification of one label, as transformers
    saves it: mlx-embeddings' encoder under `roberta.` (no pooler), and the head."""
    from mlx_embeddings.models import xlm_roberta

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_xlmr_tokenizer(folder, 64)
    config = {**XLMR_CROSS_ENCODER_CONFIG, "vocab_size": vocab_size}
    mx.random.seed(seed)
    args = xlm_roberta.ModelArgs.from_dict({**config, "add_pooling_layer": False})
    encoder = xlm_roberta.Model(args)
    weights = {f"roberta.{key}": value for key, value in tree_flatten(encoder.parameters())}
    width = config["hidden_size"]
    weights["classifier.dense.weight"] = mx.random.normal((width, width)) / width**0.5
    weights["classifier.dense.bias"] = mx.zeros((width,))
    weights["classifier.out_proj.weight"] = 4 * mx.random.normal((1, width))
    weights["classifier.out_proj.bias"] = mx.array([-0.2])
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def build_qwen3_reranker_folders(root: Path, tokenizer_dir: Path) -> tuple[Path, Path]:
    """Qwen3-Reranker's original form (a causal LM whose yes/no logits score) and its
    sequence-classification conversion from the same weights."""
    from tests.architecture_models import build_folder

    original = build_folder("qwen3", root / "original", tokenizer_dir, seed=4)
    config = json.loads((original / "config.json").read_text())
    (original / "config.json").write_text(
        json.dumps({**config, "classifier_from_token": ["no", "yes"]}, indent=2)
    )
    converted = root / "seq-cls"
    shutil.copytree(original, converted)
    weights = mx.load(str(original / "model.safetensors"))
    head = weights.pop("lm_head.weight")
    yes, no = _token_ids(tokenizer_dir, "yes", "no")
    weights["score.weight"] = (head[yes] - head[no])[None]
    mx.save_safetensors(str(converted / "model.safetensors"), weights, metadata={"format": "mlx"})
    classifier = {**config, "architectures": ["Qwen3ForSequenceClassification"],
                  "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}  # fmt: skip
    (converted / "config.json").write_text(json.dumps(classifier, indent=2))
    return original, converted


def _token_ids(tokenizer_dir: Path, *tokens: str) -> list[int]:
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return [vocab[token] for token in tokens]
