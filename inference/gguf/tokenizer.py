"""Rebuild a Hugging Face fast tokenizer from the vocabulary embedded in a GGUF file.

GGUF stores the tokenizer as plain metadata (token strings, merges, token types and
special-token ids). mlx-lm loads tokenizers through ``transformers``, so this module turns
that metadata into ``tokenizer.json`` / ``tokenizer_config.json`` files.

Only byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) are supported; a
SentencePiece vocabulary (``"llama"``) is rejected rather than approximated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

# GGUF token types (llama.cpp ``llama_token_type``).
_TOKEN_TYPE_UNKNOWN = 2
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

# Pre-tokenizer regexes used by llama.cpp for the ``tokenizer.ggml.pre`` names we know.
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PRE_GPT2 = {"default", "gpt2", "gpt-2"}
# StarCoder-style vocabularies split every digit before the GPT-2 regex runs.
_PRE_DIGITS = {"smollm", "starcoder", "refact", "codeshell", "command-r", "exaone", "minerva"}
_PRE_LLAMA3 = {"llama3", "llama-v3", "llama-bpe", "smaug-bpe", "falcon3"}
_PRE_QWEN2 = {"qwen2", "deepseek-r1-qwen"}


class TokenizerImportError(ValueError):
    """The GGUF tokenizer metadata is missing, malformed or of an unsupported kind."""


@dataclass(frozen=True)
class GGUFTokenizer:
    """A tokenizer rebuilt from GGUF metadata, ready to be written next to the weights.

    Attributes:
        tokenizer: The ``tokenizers`` object that becomes ``tokenizer.json``.
        config: Contents of ``tokenizer_config.json``.
        special_tokens_map: Contents of ``special_tokens_map.json``.
        bos_token_id: Beginning-of-sequence id, if the file declares one.
        eos_token_ids: Ids that end generation (eos first, then end-of-turn ids).
    """

    tokenizer: Tokenizer
    config: dict[str, Any]
    special_tokens_map: dict[str, str]
    bos_token_id: int | None
    eos_token_ids: list[int]

    def save(self, folder: Path) -> None:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
        self.tokenizer.save(str(folder / "tokenizer.json"))
        write_json(folder / "tokenizer_config.json", self.config)
        write_json(folder / "special_tokens_map.json", self.special_tokens_map)


def build_tokenizer(metadata: Mapping[str, Any], model_max_length: int) -> GGUFTokenizer:
    """Build a fast tokenizer and its config files from GGUF ``tokenizer.*`` metadata.

    Args:
        metadata: Decoded GGUF key/value metadata.
        model_max_length: Context length to advertise in ``tokenizer_config.json``.

    Returns:
        The rebuilt tokenizer bundle.

    Raises:
        TokenizerImportError: If the vocabulary kind or pre-tokenizer is unsupported or the
            metadata is inconsistent.
    """
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise TokenizerImportError(f"unsupported tokenizer model {kind!r} (only 'gpt2' BPE)")
    tokens = _string_list(metadata, "tokenizer.ggml.tokens")
    merges = _parse_merges(_string_list(metadata, "tokenizer.ggml.merges"))
    token_types = list(metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    if len(token_types) != len(tokens):
        raise TokenizerImportError("tokenizer.ggml.token_type length differs from token list")

    pre = metadata.get("tokenizer.ggml.pre") or "default"
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)  # duplicates keep their first id, like llama.cpp
    bpe = models.BPE(vocab, merges, ignore_merges=pre in _PRE_LLAMA3)
    tokenizer = Tokenizer(bpe)
    add_prefix_space = bool(metadata.get("tokenizer.ggml.add_space_prefix", False))
    tokenizer.pre_tokenizer = _pre_tokenizer(pre, add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    _register_added_tokens(tokenizer, tokens, token_types)

    special = _special_tokens(metadata, tokens)
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False))
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False))
    tokenizer.post_processor = _post_processor(special, tokens, add_bos, add_eos)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        **{f"{role}_token": tokens[token_id] for role, token_id in special.items()},
    }
    if template := metadata.get("tokenizer.chat_template"):
        config["chat_template"] = template
    return GGUFTokenizer(
        tokenizer=tokenizer,
        config=config,
        special_tokens_map={f"{role}_token": tokens[i] for role, i in special.items()},
        bos_token_id=special.get("bos"),
        eos_token_ids=_eos_ids(metadata, special, len(tokens)),
    )


def _string_list(metadata: Mapping[str, Any], key: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise TokenizerImportError(f"GGUF metadata {key!r} is missing or not a string list")
    return value


def _parse_merges(raw: list[str]) -> list[tuple[str, str]]:
    merges = []
    for merge in raw:
        parts = merge.split(" ")
        # Byte-level tokens never contain a literal space, so anything else is corrupt.
        if len(parts) != 2:
            raise TokenizerImportError(f"malformed BPE merge {merge!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _pre_tokenizer(pre: str, add_prefix_space: bool) -> pre_tokenizers.PreTokenizer:
    """Pick the pre-tokenizer llama.cpp uses for ``pre``, so token boundaries match."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    if pre in _PRE_GPT2:
        return byte_level
    if pre in _PRE_DIGITS:
        digits = pre_tokenizers.Digits(individual_digits=True)
        return pre_tokenizers.Sequence([digits, byte_level])
    if pre in _PRE_LLAMA3 or pre in _PRE_QWEN2:
        regex = _LLAMA3_REGEX if pre in _PRE_LLAMA3 else _QWEN2_REGEX
        split = pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)
        raw_bytes = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)
        return pre_tokenizers.Sequence([split, raw_bytes])
    raise TokenizerImportError(f"unsupported tokenizer pre-tokenizer {pre!r}")


def _register_added_tokens(tokenizer: Tokenizer, tokens: list[str], types: list[int]) -> None:
    """Make control and user-defined tokens match whole, so they encode as one id.

    Control tokens are special (hidden by ``skip_special_tokens``); user-defined ones are
    ordinary added tokens, mirroring how llama.cpp renders them.
    """
    special, plain = [], []
    for token, token_type in zip(tokens, types, strict=True):
        if token_type in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_UNKNOWN):
            special.append(AddedToken(token, special=True, normalized=False))
        elif token_type == _TOKEN_TYPE_USER_DEFINED:
            plain.append(AddedToken(token, special=False, normalized=False))
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(plain)


def _special_tokens(metadata: Mapping[str, Any], tokens: list[str]) -> dict[str, int]:
    keys = {
        "bos": "tokenizer.ggml.bos_token_id",
        "eos": "tokenizer.ggml.eos_token_id",
        "unk": "tokenizer.ggml.unknown_token_id",
        "pad": "tokenizer.ggml.padding_token_id",
    }
    special = {}
    for role, key in keys.items():
        token_id = metadata.get(key)
        if token_id is None:
            continue
        if not 0 <= int(token_id) < len(tokens):
            raise TokenizerImportError(f"{key} = {token_id} is outside the vocabulary")
        special[role] = int(token_id)
    return special


def _post_processor(
    special: dict[str, int], tokens: list[str], add_bos: bool, add_eos: bool
) -> processors.PostProcessor:
    """Bake GGUF's add_bos/add_eos flags into tokenizer.json, where every loader sees them."""
    bos = special.get("bos") if add_bos else None
    eos = special.get("eos") if add_eos else None
    if bos is None and eos is None:
        return processors.ByteLevel(trim_offsets=False)
    prefix = [tokens[bos]] if bos is not None else []
    suffix = [tokens[eos]] if eos is not None else []
    return processors.TemplateProcessing(
        single=[*prefix, "$A", *suffix],
        pair=[*prefix, "$A", *suffix, *prefix, "$B:1", *suffix],
        special_tokens=[(tokens[i], i) for i in {bos, eos} if i is not None],
    )


def _eos_ids(metadata: Mapping[str, Any], special: dict[str, int], vocab_size: int) -> list[int]:
    """Collect every id that should stop generation (chat models end turns with eot)."""
    ids = [special["eos"]] if "eos" in special else []
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        value = metadata.get(key)
        if value is not None and 0 <= int(value) < vocab_size and int(value) not in ids:
            ids.append(int(value))
    return ids


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as UTF-8 JSON the way Hugging Face config files look."""
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
