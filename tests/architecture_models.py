"""Tiny random-weight models for every architecture the installed mlx-lm can build.

The compatibility matrix runs each architecture through our engine. Real checkpoints are
gigabytes and most are gated, so each architecture gets a model of its own shape (its
layer kinds, its caches, its MoE routing, its weight names) at a size that builds in well
under a second, saved as mlx-lm saves a model, with the default model's tokenizer beside it.

    python tests/architecture_models.py [-v] [model_type ...]

builds each architecture (all by default), loads it back through mlx-lm (the model alone,
then with its tokenizer as the engine does: transformers then validates config.json with its
own config class) and generates a few tokens greedily, printing one line per architecture
(-v adds the failures' tracebacks).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import io
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

REPO_ROOT = Path(__file__).resolve().parent.parent
# The default model's tokenizer (SmolLM2): it has a chat template, and its ids go up to
# 49151, so every tiny model has a vocabulary of 49152.
DEFAULT_TOKENIZER_DIR = REPO_ROOT / "var" / "models" / "smollm2-135m-instruct"
VOCAB_SIZE = 49152
# What build_folder copies from the tokenizer's folder: the first two must be there.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)
REQUIRED_TOKENIZER_FILES = TOKENIZER_FILES[:2]


class Unbuildable(Exception):
    """An architecture that cannot be built as a tiny random-weight model here; the message
    says why in one line, so that the matrix can list it apart from a failure."""


class RoundTripError(Exception):
    """The saved weights do not load back as the parameters that were saved (a sanitize
    step that is not idempotent, or weights the model drops or renames on load)."""


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------

# The shared base: a llama-shaped model, 2 layers of width 64, 4 query heads of 16 over 2
# KV heads. Keys an architecture's ModelArgs does not take are dropped by its from_dict,
# so the several spellings of the norm epsilon can all stand here.
BASE_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "layer_norm_eps": 1e-5,
    "layer_norm_epsilon": 1e-5,
    "norm_eps": 1e-5,
    "attention_bias": False,
    "mlp_bias": False,
    # Untied, the common default: some architectures use an lm_head even when told their
    # embeddings are tied (Baichuan-M1's forward, MiniCPM's sanitize).
    "tie_word_embeddings": False,
}

# Mixture of experts: 4 experts, 2 per token, one shared expert, the first layer dense
# (where the architecture has dense layers) so that both kinds of layer are built.
_MOE: dict[str, Any] = {
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "norm_topk_prob": True,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 1.0,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}

# Multi-head latent attention (DeepSeek V2 and its descendants).
_MLA: dict[str, Any] = {
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}

# Linear-attention layers (gated delta nets): small heads, a short convolution.
_LINEAR_ATTENTION: dict[str, Any] = {
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
}

# YaRN rope scaling as DeepSeek and Mistral 3 checkpoints carry it (Mistral's adds the
# Llama 4 attention scaling beta).
_YARN: dict[str, Any] = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 256,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "llama_4_scaling_beta": 0.1,
}

# Granite's muP multipliers, at 1 so they leave the activations alone.
_GRANITE: dict[str, Any] = {
    "logits_scaling": 1.0,
    "attention_multiplier": 1.0,
    "embedding_multiplier": 1.0,
    "residual_multiplier": 0.22,  # a real Granite 3 config's: the residual is scaled
}

# LongCat-Flash's latent attention and zero-computation experts (both of its modules).
_LONGCAT: dict[str, Any] = {
    **_MLA,
    "ffn_hidden_size": 128,
    "moe_topk": 2,
    "expert_ffn_hidden_size": 64,
    "n_routed_experts": 4,
    "zero_expert_num": 2,
    "num_layers": 2,
    "routed_scaling_factor": 1.0,
    "mla_scale_q_lora": True,
    "mla_scale_kv_lora": True,
}

# Sliding-window layers: a window of 16 tokens, one sliding layer before one global.
_SLIDING: dict[str, Any] = {
    "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention"],
}

# Per architecture: what differs from BASE_CONFIG. A "text_config" entry nests the
# language model's config (on top of BASE_CONFIG too), as vision-language checkpoints do.
ARCHITECTURE_OVERRIDES: dict[str, dict[str, Any]] = {
    "Klear": {**_MOE, "mlp_only_layers": [0]},
    "afm7": {
        "hidden_dim": 64,
        "num_layers": 2,
        "num_kv_reuse_layers": 1,
        "num_heads": 4,
        "num_kv_heads": 2,
    },
    "afmoe": {**_MOE, **_SLIDING, "num_dense_layers": 1},
    "apertus": {"post_norm": True, "qk_norm": True},
    "baichuan_m1": {"sliding_window": 16, "sliding_window_layers": [0], "conv_window": 2},
    "bailing_hybrid": {
        **_MOE,
        **_MLA,
        "layer_group_size": 2,
        "group_norm_size": 1,
        "partial_rotary_factor": 0.5,
    },
    "bailing_moe": _MOE,
    "bailing_moe_linear": {**_MOE, "layer_group_size": 2, "group_norm_size": 1},
    "bailing_moe_v3": {
        **_MOE,
        **_MLA,
        "moe_shared_expert_intermediate_size": 64,
        "layer_group_size": 2,
    },
    "bitnet": {},
    "cohere": {},
    "cohere2": {"sliding_window": 16, "sliding_window_pattern": 2},
    "dbrx": {
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
        "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
    },
    "deepseek": _MOE,
    "deepseek_v2": {**_MOE, **_MLA, "rope_scaling": _YARN},
    "deepseek_v3": {**_MOE, **_MLA},
    "deepseek_v32": {**_MOE, **_MLA, "index_head_dim": 16, "index_n_heads": 2, "index_topk": 4},
    "deepseek_v41": {
        **_MOE,
        "q_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "o_groups": 2,
        "o_lora_rank": 16,
        "sliding_window": 16,
        # Both layers compress their KV 4 to 1 and index it, beside the window.
        "compress_ratios": [4, 4],
        "kv_source_layer_ids": [0, 1],
        "index_source_layer_ids": [0, 1],
        "hc_mult": 2,
        "index_n_heads": 2,
        "index_head_dim": 16,
        "index_topk": 4,
    },
    "dots1": _MOE,
    "ernie4_5": {"use_bias": False},
    "ernie4_5_moe": {
        **_MOE,
        "use_bias": False,
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_layer_start_index": 1,
        "moe_num_shared_experts": 1,
    },
    "exaone": {"num_layers": 2},
    "exaone4": {
        # mlx-lm reads the "L"/"G" string; transformers derives layer_types from an int
        # pattern only, so EXAONE 4 checkpoints carry both, as here.
        **_SLIDING,
        "sliding_window_pattern": "LG",
        "rope_scaling": None,
    },
    "exaone_moe": {**_MOE, **_SLIDING, "is_moe_layer": [False, True]},
    "falcon_h1": {
        "mamba_d_ssm": 64,
        "mamba_d_head": 16,
        "mamba_n_heads": 4,
        "mamba_d_state": 16,
        "mamba_n_groups": 1,
        "mamba_chunk_size": 16,
    },
    # mlx-lm spells its local mixer layer "conv_mixer" only (any other entry builds an
    # attention layer); transformers has no Gear config, and the generic one it falls back
    # to rejects that entry, so mlx_lm.load fails on this folder as on Gear checkpoints.
    "gear": {"layer_types": ["conv_mixer", "full_attention"]},
    "gemma": {},
    "gemma2": {},
    "gemma3_text": {"sliding_window": 16, "sliding_window_pattern": 2},
    "gemma3n": {
        "text_config": {
            "num_hidden_layers": 4,
            "num_kv_shared_layers": 2,
            "vocab_size_per_layer_input": VOCAB_SIZE,
            "sliding_window": 16,
            "rope_local_base_freq": 10000.0,
            "final_logit_softcapping": 30.0,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0],
            "hidden_size_per_layer_input": 16,
            "altup_num_inputs": 2,
            "altup_coef_clip": 120.0,
            "altup_correct_scale": True,
            "altup_active_idx": 0,
            "laurel_rank": 8,
        },
    },
    "gemma4_text": {
        "num_hidden_layers": 4,
        "num_kv_shared_layers": 2,
        "global_head_dim": 32,
        "num_global_key_value_heads": 1,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": VOCAB_SIZE,
        "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
    },
    "glm": {},
    "glm4": {"partial_rotary_factor": 0.5},
    "glm4_moe": {**_MOE, "use_qk_norm": True, "partial_rotary_factor": 0.5, "rope_scaling": None},
    "glm4_moe_lite": {**_MOE, **_MLA},
    "glm_moe_dsa": {
        **_MOE,
        **_MLA,
        "index_head_dim": 16,
        "index_n_heads": 2,
        "index_topk": 4,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "moe_layer_freq": 1,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    "gpt2": {"n_ctx": 1024, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 1024},
    "gpt_bigcode": {"n_embd": 64, "n_layer": 2, "n_inner": 128, "n_head": 4, "n_positions": 1024},
    "gpt_neox": {"rotary_emb_base": 10000.0, "rotary_pct": 0.25},
    "gpt_oss": {**_MOE, **_SLIDING},
    "gptj": {"n_embd": 64, "n_head": 4, "n_layer": 2, "rotary_dim": 8, "n_positions": 1024},
    "granite": _GRANITE,
    "granitemoe": {**_GRANITE, **_MOE},
    "granitemoehybrid": {
        **_GRANITE,
        **_MOE,
        "shared_intermediate_size": 64,
        # transformers checks that the heads span mamba_expand * hidden_size: 4 * 32 = 2 * 64.
        "mamba_expand": 2,
        "mamba_n_heads": 4,
        "mamba_d_head": 32,
        "mamba_proj_bias": False,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "mamba_conv_bias": True,
        "layer_types": ["mamba", "attention"],
    },
    "helium": {},
    "hunyuan": {
        "moe_topk": 2,
        "num_experts": 4,
        "num_shared_expert": 1,
        "use_mixed_mlp_moe": True,
        "use_qk_norm": True,
        "use_cla": True,
        "cla_share_factor": 2,
        "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"},
    },
    "hunyuan_v1_dense": {
        "use_qk_norm": True,
        "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"},
    },
    "internlm2": {},
    "internlm3": {},
    "iquestloopcoder": {"loop_num": 2, "loop_window_size": 16},
    "jamba": {
        **_MOE,
        "attn_layer_offset": 1,
        "attn_layer_period": 2,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_expand": 2,
    },
    "kimi_k3": {
        "text_config": {
            **_MLA,
            # kda_layers counts from 1: the first layer is linear (KDA), the second MLA.
            "linear_attn_config": {
                "num_heads": 4,
                "head_dim": 16,
                "short_conv_kernel_size": 4,
                "kda_layers": [1],
            },
            "num_experts": 4,
            "num_experts_per_token": 2,
            "num_shared_experts": 1,
            "moe_intermediate_size": 64,
            "first_k_dense_replace": 1,
            # Kimi K3's additions: experts in a latent space, attention residuals.
            "routed_expert_hidden_size": 32,
            "latent_moe_use_norm": True,
            "attn_res_block_size": 2,
        },
    },
    "kimi_linear": {
        **_MLA,
        # As for kimi_k3: a KDA layer, then an MLA layer.
        "linear_attn_config": {"num_heads": 4, "head_dim": 16, "kda_layers": [1]},
        "model_max_length": 1024,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 64,
        "first_k_dense_replace": 1,
    },
    "laguna": {
        **_MOE,
        **_SLIDING,
        "mlp_layer_types": ["dense", "sparse"],
        "num_attention_heads_per_layer": [4, 4],
        "partial_rotary_factor": 0.5,
    },
    "lfm2": {
        "block_dim": 64,
        "block_ff_dim": 128,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "conv_bias": False,
        "conv_L_cache": 3,
        "full_attn_idxs": [1],
    },
    "lfm2_moe": {
        **_MOE,
        "num_dense_layers": 1,
        "use_expert_bias": True,
        "conv_bias": False,
        "conv_L_cache": 3,
        "full_attn_idxs": [1],
    },
    "lille-130m": {
        "block_size": 1024,
        "n_embd": 64,
        "n_head": 4,
        "n_kv_heads": 2,
        "n_layer": 2,
    },
    "llama": {},
    "llama4": {
        "text_config": {
            **_MOE,
            # Every fourth layer is the global one (no RoPE), which mlx-lm's mask expects.
            "num_hidden_layers": 4,
            "num_experts_per_tok": 1,  # all mlx-lm supports
            "attention_chunk_size": 16,
            "interleave_moe_layer_step": 2,
            "intermediate_size_mlp": 128,
            "rope_scaling": None,
            "use_qk_norm": True,
        },
    },
    "llama4_text": {"intermediate_size_mlp": 128, "no_rope_layers": [1, 0], "use_qk_norm": True},
    "longcat_flash": {
        **_LONGCAT,
        "attention_method": "MLA",
        "zero_expert_type": "identity",
    },
    "longcat_flash_ngram": {
        **_LONGCAT,
        # The n-gram embedders have ratio * vocab_size rows each: the smallest ratio,
        # and 2 * (3 - 1) embedders.
        "ngram_vocab_size_ratio": 1,
        "emb_split_num": 2,
        "emb_neighbor_num": 3,
    },
    "mamba": {
        "state_size": 8,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_rank": 8,
    },
    "mamba2": {
        "num_heads": 8,
        "head_dim": 16,
        "state_size": 16,
        "n_groups": 1,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_limit": [0.0, 1e9],
        "time_step_rank": "auto",
    },
    "mellum": {
        **_MOE,
        **_SLIDING,
        "rope_parameters": {
            "sliding_attention": {"rope_theta": 10000.0},
            "full_attention": {"rope_theta": 1000000.0},
        },
    },
    "mimo": {},
    "mimo_v2_flash": {
        **_MOE,
        "hybrid_layer_pattern": [0, 1],
        "moe_layer_freq": [0, 1],
        "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False,
        "sliding_window_size": 16,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "layernorm_epsilon": 1e-5,
        "swa_rope_theta": 10000.0,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 2,
        "v_head_dim": 16,
        "swa_head_dim": 16,
        "swa_v_head_dim": 16,
        "partial_rotary_factor": 0.5,
    },
    "minicpm": {"dim_model_base": 64, "scale_depth": 1.0, "scale_emb": 1.0},
    "minicpm3": {
        **_MLA,
        "dim_model_base": 64,
        "scale_depth": 1.0,
        "scale_emb": 1.0,
        "rope_scaling": {
            "type": "longrope",
            "original_max_position_embeddings": 256,
            "short_factor": [1.0] * 4,
            "long_factor": [2.0] * 4,
        },
    },
    "minimax": {**_MOE, "shared_intermediate_size": 64, "rotary_dim": 8},
    "minimax_m3_vl": {
        "text_config": {
            **_MOE,
            "dense_intermediate_size": 128,
            "shared_intermediate_size": 64,
            "mlp_layer_types": ["dense", "sparse"],
            # The second layer attends sparsely: the top 2 of its blocks of 4 keys.
            "layer_types": ["full_attention", "minimax_m3_sparse"],
            "sparse_attention_config": {
                "sparse_num_index_heads": 2,
                "sparse_index_dim": 16,
                "sparse_block_size": 4,
                "sparse_topk_blocks": 2,
                "sparse_local_block": 1,
            },
        },
    },
    "ministral3": {"rope_parameters": _YARN},
    "mistral4": {**_MOE, **_MLA, "rope_parameters": _YARN},
    "mixtral": _MOE,
    "muse_glimmer": _SLIDING,
    "muse_spark": {
        "text_config": {
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "moe_hidden_size": 64,
            "moe_intermediate_size": 64,
            "post_norm_eps": 1e-5,
            "rope_parameters": {"rope_theta": 10000.0},
            "layer_rope_theta": [10000.0, 0],
            "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"],
            "final_logit_softcapping": 30.0,
            "output_multiplier": 1.0,
        },
        # mlx-lm has no audio tower, but transformers checks that the audio encoder's output
        # is the text model's width (its default is the full model's).
        "audio_config": {"out_hidden_size": 64},
    },
    "nanbeige": {},
    "nanochat": {},
    "nemotron": {"hidden_act": "relu2"},
    "nemotron-nas": {
        "block_configs": [
            {
                "attention": {"n_heads_in_group": 2, "no_op": False, "replace_with_linear": False},
                "ffn": {"ffn_mult": 1.0, "no_op": False, "replace_with_linear": False},
            }
        ]
        * 2,
    },
    "nemotron_h": {
        **_MOE,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "mamba_proj_bias": False,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "n_groups": 1,
        "use_bias": False,
        "use_conv_bias": True,
        # Mamba, dense MLP, attention, MoE: Nemotron-H's and Nemotron 3's layer kinds.
        "hybrid_override_pattern": ["M", "-", "*", "E"],
    },
    "olmo": {
        "d_model": 64,
        "n_layers": 2,
        "mlp_hidden_size": 128,
        "n_heads": 4,
        "embedding_size": VOCAB_SIZE,
    },
    "olmo2": {},
    "olmo3": _SLIDING,
    "olmo_hybrid": {
        **_LINEAR_ATTENTION,
        "linear_allow_neg_eigval": True,
        "layer_types": ["linear_attention", "full_attention"],
    },
    "olmoe": _MOE,
    "openelm": {
        "head_dim": 16,
        "num_transformer_layers": 2,
        "model_dim": 64,
        "ffn_dim_divisor": 16,
        "num_query_heads": [4, 4],
        "num_kv_heads": [2, 2],
        "ffn_multipliers": [1.0, 2.0],
    },
    "phi": {"partial_rotary_factor": 0.5},
    "phi3": {},
    "phi3small": {
        # Its logits mask ids 100256-100351 (tiktoken's special tokens) in place: a smaller
        # vocabulary makes that an out-of-bounds write, which corrupts the heap.
        "vocab_size": 100352,
        "dense_attention_every_n_layers": 2,
        "ff_intermediate_size": 128,
        "gegelu_limit": 20.0,
    },
    "phimoe": {
        **_MOE,
        "rope_scaling": {
            "type": "longrope",
            "long_factor": [1.0] * 8,
            "short_factor": [1.0] * 8,
            "long_mscale": 1.0,
            "short_mscale": 1.0,
            "original_max_position_embeddings": 512,
        },
    },
    "phixtral": {
        "num_vocab": VOCAB_SIZE,
        "model_dim": 64,
        "num_heads": 4,
        "num_layers": 2,
        "rotary_dim": 8,
        "num_experts_per_tok": 2,
        "num_local_experts": 4,
    },
    "plamo": {"n_shared_head": 2},  # query heads per KV head
    "plamo2": {
        "hidden_size_per_head": 16,
        "attention_window_size": 16,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_num_heads": 4,
        "mamba_step": 2,
        "mamba_chunk_size": 16,
    },
    "plamo3": {"sliding_window": 16, "sliding_window_pattern": 2},
    "prism_hadamard_qwen35": {
        # A 2-bit pack: the modules its manifest names become Hadamard-rotated quantized
        # layers (zero-filled, so the MLPs add nothing), whose rotation blocks are 512 wide
        # at least: the MLPs' down projections, 512 wide.
        "text_config": {
            **_LINEAR_ATTENTION,
            "intermediate_size": 512,
            "full_attention_interval": 2,
            "rope_parameters": {
                "type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        },
        "schema_version": 1,
        "tensor_namespace": "mlx-lm-text",
        "quantization": {"bits": 2, "group_size": 128, "mode": "affine"},
        "modules": [
            {
                "path": f"model.layers.{layer}.mlp.down_proj",
                "embedding": False,
                "dtype": "float16",
                "block": 512,
            }
            for layer in range(2)
        ],
    },
    "qwen": {"kv_channels": 16},
    "qwen2": {},
    "qwen2_moe": _MOE,
    "qwen3": {},
    "qwen3_5": {
        "text_config": {
            **_LINEAR_ATTENTION,
            "full_attention_interval": 2,
            "rope_parameters": {
                "type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        },
    },
    "qwen3_5_moe": {
        "text_config": {
            **_LINEAR_ATTENTION,
            **_MOE,
            "full_attention_interval": 2,
            "rope_parameters": {
                "type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        },
    },
    "qwen3_moe": _MOE,
    "qwen3_next": {
        **_LINEAR_ATTENTION,
        **_MOE,
        "full_attention_interval": 2,
        "partial_rotary_factor": 0.5,
    },
    "recurrent_gemma": {
        "conv1d_width": 4,
        "logits_soft_cap": 30.0,
        "attention_window_size": 16,
        "block_types": ["recurrent", "attention"],
    },
    "rwkv7": {
        "head_dim": 16,
        "a_low_rank_dim": 8,
        "v_low_rank_dim": 8,
        "gate_low_rank_dim": 8,
        "decay_low_rank_dim": 8,
    },
    "seed_oss": {},
    "smollm3": {},
    "solar_open": {**_MOE, "partial_rotary_factor": 1.0},
    "spark2_5": {
        **_SLIDING,
        "rope_parameters": {
            "sliding_attention": {"rope_theta": 10000.0},
            "full_attention": {"rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
        },
    },
    "stablelm": {"use_qkv_bias": False, "partial_rotary_factor": 0.25},
    "starcoder2": {},
    "step3p5": {
        "num_attention_groups": 2,
        "rope_theta": [10000.0, 10000.0],
        "sliding_window": 16,
        "layer_types": ["full_attention", "sliding_attention"],
        "partial_rotary_factors": [0.5, 1.0],
        "attention_other_setting": {"num_attention_heads": 4, "num_attention_groups": 2},
        "use_head_wise_attn_gate": True,
        "moe_num_experts": 4,
        "moe_top_k": 2,
        "moe_intermediate_size": 64,
        "share_expert_dim": 64,
        "moe_layers_enum": "1",
    },
    "talkie": {},
    "telechat3": {},
    "youtu_llm": _MLA,
}

# Vision-language wrappers whose language model is another architecture of the table:
# their text_config is that architecture's tiny config (the vision tower is left out, as
# mlx-lm's sanitize strips it).
TEXT_ARCHITECTURE_OF: dict[str, str] = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "kimi_k25": "deepseek_v3",
    "kimi_vl": "deepseek_v3",
    "lfm2-vl": "lfm2",
    "mistral3": "ministral3",
    "pixtral": "llama",
    "qwen2_vl": "qwen2",
    "qwen3_vl": "qwen3",
    "qwen3_vl_moe": "qwen3_moe",
}


# ---------------------------------------------------------------------------------------
# Architectures, configs, folders
# ---------------------------------------------------------------------------------------


def _models_dir() -> Path:
    import mlx_lm.models

    return Path(mlx_lm.models.__file__).parent


def _binds_model_and_args(source: str) -> bool:
    """Whether a module's top level binds both Model and ModelArgs (a class, an assignment
    or an import: solar_open imports its Model), read from the source because importing
    is not harmless (olmo's module exits the process when ai2-olmo is missing)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return {"Model", "ModelArgs"} <= names


def architectures() -> list[str]:
    """Every model_type the installed mlx-lm can build, read from its models package rather
    than listed here, so that an upgrade's new architectures show up in the matrix (as
    Unbuildable until the table has them) instead of going untested."""
    return sorted(
        path.stem
        for path in _models_dir().glob("*.py")
        if _binds_model_and_args(path.read_text(encoding="utf-8"))
    )


def tiny_config(model_type: str) -> dict[str, Any]:
    """The config.json of a tiny `model_type`: one shared scale for every architecture, so
    that the table says only what is particular to each."""
    if model_type in TEXT_ARCHITECTURE_OF:
        return {
            "model_type": model_type,
            "vocab_size": VOCAB_SIZE,
            "text_config": tiny_config(TEXT_ARCHITECTURE_OF[model_type]),
        }
    if model_type not in ARCHITECTURE_OVERRIDES:
        raise Unbuildable(f"no tiny config: {model_type} is not in ARCHITECTURE_OVERRIDES")
    overrides = copy.deepcopy(ARCHITECTURE_OVERRIDES[model_type])
    if "text_config" not in overrides:
        return {**copy.deepcopy(BASE_CONFIG), "model_type": model_type, **overrides}
    text_config = {
        **copy.deepcopy(BASE_CONFIG),
        "model_type": model_type,
        **overrides.pop("text_config"),
    }
    return {
        "model_type": model_type,
        "vocab_size": VOCAB_SIZE,
        "text_config": text_config,
        **overrides,
    }


def _import_architecture(model_type: str) -> ModuleType:
    """mlx-lm's module for `model_type`, as load_model finds it. A module that exits at
    import (olmo without ai2-olmo) raises Unbuildable with what it printed, rather than
    ending the process that builds the others."""
    from mlx_lm.utils import MODEL_REMAPPING

    # load_model maps some model_types to other modules first: the folder's must not be one.
    if (target := MODEL_REMAPPING.get(model_type, model_type)) != model_type:
        raise ValueError(f"mlx-lm would load model_type {model_type} as {target}")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return importlib.import_module(f"mlx_lm.models.{model_type}")
    except SystemExit as error:
        reason = printed.getvalue().strip() or f"exit status {error.code}"
        raise Unbuildable(f"mlx_lm.models.{model_type} exits at import: {reason}") from None


def _check_round_trip(folder: Path, saved: dict[str, mx.array]) -> None:
    """Load the folder as mlx-lm does (sanitize included) and compare its parameters with
    the ones saved."""
    from mlx_lm.utils import load_model

    model, _ = load_model(folder)
    loaded = dict(tree_flatten(model.parameters()))
    differences = {
        "missing": sorted(saved.keys() - loaded.keys()),
        "extra": sorted(loaded.keys() - saved.keys()),
        "changed": sorted(
            key
            for key in saved.keys() & loaded.keys()
            if saved[key].shape != loaded[key].shape
            or not mx.allclose(saved[key], loaded[key], rtol=1e-5, atol=1e-7).item()
        ),
    }
    if any(differences.values()):
        listed = "; ".join(
            f"{kind} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
            for kind, keys in differences.items()
            if keys
        )
        raise RoundTripError(f"weights do not round-trip: {listed}")


def build_folder(
    model_type: str, folder: Path, tokenizer_dir: Path, seed: int = 0, **config_changes: Any
) -> Path:
    """Save a random-weight tiny `model_type` in `folder` as mlx-lm saves a model (weights,
    config.json, tokenizer files), and check that mlx-lm loads it back to the same weights,
    so that a failure in the matrix is the engine's and not the fixture's. `config_changes`
    replace keys of its tiny config (a RoPE scaling, say)."""
    from mlx_lm.utils import save_config, save_model

    config = {**tiny_config(model_type), **copy.deepcopy(config_changes)}
    module = _import_architecture(model_type)
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(copy.deepcopy(config)))
    if hasattr(model, "sanitize"):
        # Save the weights as loading leaves them, as mlx_lm.convert does: a sanitize that
        # projects them (Baichuan-M1 normalizes its lm_head rows) then leaves them be.
        sanitized = model.sanitize(dict(tree_flatten(model.parameters())))
        model.load_weights(list(sanitized.items()), strict=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)

    folder = Path(folder)
    save_model(folder, model)
    save_config(copy.deepcopy(config), config_path=folder / "config.json")
    for name in TOKENIZER_FILES:
        source = Path(tokenizer_dir) / name
        if source.exists() or name in REQUIRED_TOKENIZER_FILES:
            shutil.copy(source, folder / name)

    _check_round_trip(folder, weights)
    return folder


# ---------------------------------------------------------------------------------------
# Smoke run: python tests/architecture_models.py [-v] [model_type ...]
# ---------------------------------------------------------------------------------------

# Six token ids of the tokenizer, the last its highest.
PROMPT = [1, 504, 3458, 17, 40000, 49151]
GENERATED_TOKENS = 4


def _smoke(model_type: str, scratch: Path, verbose: bool) -> str:
    """Build, load and generate greedily; the outcome, as printed."""
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model

    folder = scratch / model_type
    stage = "build"
    try:
        build_folder(model_type, folder, DEFAULT_TOKENIZER_DIR)
        stage = "load"
        model, _ = load_model(folder)
        # As the engine loads a folder: the tokenizer too, through AutoTokenizer, which
        # reads config.json into transformers' config class for the model_type.
        stage = "load with tokenizer"
        mlx_lm.load(str(folder))
        stage = "generate"
        steps = generate_step(mx.array(PROMPT), model, max_tokens=GENERATED_TOKENS)
        tokens = [int(token) for token, _ in steps]
        if len(tokens) != GENERATED_TOKENS:
            raise ValueError(f"generated {len(tokens)} tokens, not {GENERATED_TOKENS}")
    except Exception as error:
        if verbose:
            traceback.print_exc()
        lines = str(error).strip().splitlines()
        return f"FAILED at {stage}: {type(error).__name__}: {lines[0] if lines else ''}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return "ok"


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    names = [arg for arg in argv if arg != "-v"] or architectures()
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for model_type in names:
            start = time.perf_counter()
            outcome = _smoke(model_type, Path(scratch), verbose)
            failed += outcome != "ok"
            print(f"{model_type:24} {outcome}  ({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{len(names) - failed} of {len(names)} ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
