"""Whether a model folder embeds, and how, read from its files without loading weights.

Two kinds of folder embed. An encoder whose architecture mlx-embeddings implements (BERT,
XLM-R, ModernBERT...) and mlx-lm does not. A decoder that mlx-lm loads, made an embedding
model by sentence-transformers' `modules.json` and its `1_Pooling/config.json` (last
token, mean or CLS) with, when listed, a Normalize module. The pooling is read from those
files, never guessed: a decoder without them is a chat model, and a folder whose modules
ask for what is not served here (max pooling, a Dense layer) says so.

A third kind reranks (engine/embedding/reranker.py). A cross-encoder, its config's
architecture a one-label `...ForSequenceClassification`: a BERT or XLM-R encoder (found here
first, since its config also looks like an encoder mlx-embeddings embeds with), or a decoder
mlx-lm loads with a `score` head (Qwen3-Reranker converted to sequence classification). Or
the original Qwen3-Reranker, a causal LM that answers "yes" or "no", when its config carries
the keys vLLM's hf_overrides give it (`classifier_from_token: ["no", "yes"]`): nothing else
in its files tells it from a chat model.

The web side asks this to list capabilities and refuse requests; the worker to pool. The
installed libraries' model types are read from their package folders, not imported
(that would load MLX into the web process).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

ENCODER = "encoder"  # mlx-embeddings' model, its own pooling unless the files name one
DECODER = "decoder"  # mlx-lm's model, its backbone's hidden states pooled as the files say

# sentence-transformers' Pooling config keys, as the pooling served for each.
POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_lasttoken": "last",
}
UNSERVED_POOLING_MODES = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
MODEL_POOLING = "model"  # no pooling files: mlx-embeddings' own (its text_embeds)

CHAT = "chat"
EMBEDDINGS = "embeddings"
RERANK = "rerank"

# Encoder cross-encoders whose sequence-classification head is served
# (engine/embedding/cross_encoders.py): mlx-embeddings has the encoders but not the heads.
RERANKER_MODEL_TYPES = ("bert", "xlm_roberta")
# sentence-transformers' CrossEncoder applies a sigmoid to a 1-label model's logit unless
# the checkpoint's config names another activation; these names mean the raw logit.
IDENTITY_ACTIVATIONS = ("torch.nn.modules.linear.Identity", "torch.nn.Identity")


@dataclass(frozen=True)
class EmbeddingSpec:
    """How a folder's model turns tokens into one vector."""

    backend: str  # ENCODER or DECODER
    pooling: str  # "cls", "mean", "last" or MODEL_POOLING
    normalize: bool  # L2-normalized (a Normalize module, or mlx-embeddings' own pooling)
    dimension: int  # the vector's length
    model_type: str
    task: str = EMBEDDINGS  # or RERANK: a cross-encoder's one relevance score a pair
    score_activation: str = "sigmoid"  # a reranker's: "sigmoid" or "identity"
    # A decoder reranker scored from its language-model head: the ("no", "yes") tokens
    # whose logits' difference is the relevance logit; None: a `score` head of its own.
    classifier_tokens: tuple[str, str] | None = None


@dataclass(frozen=True)
class EmbeddingSupport:
    """A folder's answer: a spec, or why its embedding modules cannot be served (problem),
    or neither (a chat model)."""

    spec: EmbeddingSpec | None = None
    problem: str | None = None

    @property
    def capabilities(self) -> tuple[str, ...]:
        if self.spec is not None:
            return (self.spec.task,)
        return () if self.problem else (CHAT,)


@functools.cache
def _model_types(package: str) -> frozenset[str]:
    """The model modules under `package`/models, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    names = {p.stem for p in models.glob("*.py") if not p.stem.startswith("_")}
    names |= {p.name for p in models.iterdir() if (p / "__init__.py").is_file()}
    return frozenset(names)


def encoder_model_types() -> frozenset[str]:
    """mlx-embeddings' model types that mlx-lm does not load: its encoders."""
    return _model_types("mlx_embeddings") - _model_types("mlx_lm")


def decoder_model_types() -> frozenset[str]:
    return _model_types("mlx_lm")


def is_encoder_config(config: dict) -> bool:
    """A text encoder mlx-embeddings loads (its vision models take images, not served)."""
    return _model_type(config) in encoder_model_types() and "vision_config" not in config


def _read_json(path: Path, expected: type = dict):
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise _Unservable(f"{path.parent.name}/{path.name} cannot be read: {error}") from None
    if not isinstance(value, expected):
        raise _Unservable(f"{path.name} is not a JSON {expected.__name__}")
    return value


class _Unservable(Exception):
    """The folder's embedding files ask for what is not served; the text says why."""


def _dimension(config: dict, pooling: dict | None) -> int:
    for source in (pooling or {}, config, config.get("text_config") or {}):
        for key in ("word_embedding_dimension", "hidden_size", "d_model"):
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    raise _Unservable("config.json names no hidden_size")


def _pooling_mode(pooling: dict) -> str:
    asked = [key for key in (*POOLING_MODES, *UNSERVED_POOLING_MODES) if pooling.get(key)]
    if len(asked) != 1:
        raise _Unservable(f"1_Pooling/config.json must ask for one pooling mode, not {len(asked)}")
    if asked[0] not in POOLING_MODES:
        raise _Unservable(f"1_Pooling/config.json asks for {asked[0]}, which is not served")
    return POOLING_MODES[asked[0]]


def _modules(folder: Path) -> dict[str, str]:
    """modules.json as {module class name: its folder}; refuses modules not served here."""
    listed = _read_json(folder / "modules.json", list)
    found = {}
    for module in listed:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1] if isinstance(module, dict) else ""
        if kind not in ("Transformer", "Pooling", "Normalize"):
            raise _Unservable(f"modules.json lists a {kind or 'nameless'} module, not served")
        path = str(module.get("path", ""))
        if path.startswith("/") or ".." in Path(path).parts:
            raise _Unservable(f"modules.json names a path outside the folder: {path}")
        found[kind] = path
    return found


def _backend(model_type: str) -> str:
    if model_type in decoder_model_types():
        return DECODER
    if model_type in encoder_model_types():
        return ENCODER
    raise _Unservable(f"model_type '{model_type}' is loaded by neither mlx-lm nor mlx-embeddings")


def _model_type(config: dict) -> str:
    return str(config.get("model_type", "")).replace("-", "_")


def _is_sequence_classifier(config: dict) -> bool:
    architectures = config.get("architectures") or []
    return any(str(name).endswith("ForSequenceClassification") for name in architectures)


def _score_activation(config: dict) -> str:
    """What CrossEncoder reports for a 1-label model: sigmoid(logit), unless the config
    names the identity (sentence-transformers v4's `sentence_transformers.activation_fn`,
    or v2/v3's `sbert_ce_default_activation_function`)."""
    saved = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    return "identity" if saved in IDENTITY_ACTIVATIONS else "sigmoid"


def _classifier_tokens(config: dict) -> tuple[str, str] | None:
    """vLLM's keys for a yes/no language model scored as a classifier, when present."""
    tokens = config.get("classifier_from_token")
    if tokens is None:
        return None
    if not (
        isinstance(tokens, list) and len(tokens) == 2 and all(isinstance(t, str) for t in tokens)
    ):
        raise _Unservable("classifier_from_token must name two tokens: the 'no' and the 'yes'")
    return tokens[0], tokens[1]


def _decoder_reranker_support(config: dict, tokens: tuple[str, str] | None) -> EmbeddingSupport:
    """mlx-lm's model scoring the last token: its `score` head, or the yes/no logits."""
    return EmbeddingSupport(
        EmbeddingSpec(
            backend=DECODER,
            pooling="last",
            normalize=False,
            dimension=_dimension(config, None),
            model_type=_model_type(config),
            task=RERANK,
            score_activation=_score_activation(config),
            classifier_tokens=tokens,
        )
    )


def _reranker_support(config: dict) -> EmbeddingSupport:
    """A sequence classifier is a reranker when it has one label (one relevance logit)."""
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels", 2)
    model_type = _model_type(config)
    if count != 1:
        return EmbeddingSupport(
            problem=f"a sequence classifier of {count} labels; a reranker has one"
        )
    if model_type in decoder_model_types():
        return _decoder_reranker_support(config, None)
    if model_type not in RERANKER_MODEL_TYPES:
        return EmbeddingSupport(
            problem=f"a {model_type} cross-encoder; rerankers are served for "
            f"{', '.join(RERANKER_MODEL_TYPES)} and the decoders mlx-lm loads only"
        )
    spec = EmbeddingSpec(
        backend=ENCODER,
        pooling="cls",
        normalize=False,
        dimension=_dimension(config, None),
        model_type=model_type,
        task=RERANK,
        score_activation=_score_activation(config),
    )
    return EmbeddingSupport(spec)


def _support(folder: Path) -> EmbeddingSupport:
    if not (folder / "modules.json").is_file():
        try:
            config = _read_json(folder / "config.json")
        except _Unservable:
            return EmbeddingSupport()  # not ours to judge: the worker says what is wrong
        tokens = _classifier_tokens(config)
        if tokens is not None and _model_type(config) in decoder_model_types():
            return _decoder_reranker_support(config, tokens)
        if _is_sequence_classifier(config):
            return _reranker_support(config)
        # mlx-embeddings pools an encoder itself (mean or CLS, per model) and normalizes.
        if is_encoder_config(config):
            dimension = _dimension(config, None)
            return EmbeddingSupport(
                EmbeddingSpec(ENCODER, MODEL_POOLING, True, dimension, _model_type(config))
            )
        return EmbeddingSupport()
    modules = _modules(folder)
    if "Pooling" not in modules:
        return EmbeddingSupport()  # a decoder without pooling is a chat model
    config = _read_json(folder / "config.json")
    model_type = _model_type(config)
    pooling = _read_json(folder / modules["Pooling"] / "config.json")
    return EmbeddingSupport(
        EmbeddingSpec(
            backend=_backend(model_type),
            pooling=_pooling_mode(pooling),
            normalize="Normalize" in modules,
            dimension=_dimension(config, pooling),
            model_type=model_type,
        )
    )


def embedding_support(folder: str | Path) -> EmbeddingSupport:
    """What `folder` is: an embedding model (its spec), one that cannot be served (why), or
    a chat model; a reranker is a spec whose task is RERANK. Reads config.json,
    modules.json and the Pooling config only."""
    try:
        return _support(Path(folder))
    except _Unservable as error:
        return EmbeddingSupport(problem=str(error))
