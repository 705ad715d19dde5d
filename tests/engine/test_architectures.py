"""Every architecture the installed mlx-lm builds, served right by the engine
(architecture_matrix.py: batched rows, a prompt-cache hit, drafts, a resume, each against
mlx-lm's own `generate_step`), and docs/ARCHITECTURES.md made from the results."""

from __future__ import annotations

import pytest

from tests.architecture_models import architectures

from .architecture_matrix import DOC, render, run_matrix

# What cannot run on this machine at all, and the words its failure must carry.
NOT_HERE = {
    "bitnet": "No Metal back-end",  # its layers run a Metal-only kernel
    "muse_spark": "No Metal back-end",
    "olmo": "ai2-olmo",  # mlx-lm's module exits unless the ai2-olmo package is installed
    # mlx-lm knows its mixer layers only as "conv_mixer", which transformers' generic config
    # (it has no Gear class) refuses when mlx_lm.load reads the tokenizer: so would a real one.
    "gear": "validate_layer_type",
}


@pytest.fixture(scope="session")
def matrix() -> dict[str, dict]:
    return run_matrix(architectures())


@pytest.mark.parametrize("model_type", architectures())
def test_the_engine_serves_it_as_mlx_lm_computes_it(matrix, model_type):
    result = matrix[model_type]
    if model_type in NOT_HERE:
        assert NOT_HERE[model_type] in result.get("reason", ""), result
        return
    assert result["status"] == "served", result


def test_rows_that_cannot_share_a_batch_are_served_one_at_a_time(matrix):
    # A cache that cannot merge rows, or model code whose mask takes no batch: found at
    # load, said in the model's details, and served right all the same.
    alone = {name for name, result in matrix.items() if result.get("one_row_at_a_time")}
    assert {"llama4", "gemma2", "gpt_bigcode"} <= alone
    assert "llama" not in alone and "qwen3" not in alone


def test_recurrent_models_prefill_alone_and_match_generate_step(matrix):
    # mlx-lm's own batch generator gives a state-space row other tokens beside a longer
    # prompt (the padding runs through its state); prefilled alone, the engine's do not.
    for name in ("mamba", "jamba", "qwen3_next"):
        assert matrix[name]["prefills_alone"] and matrix[name]["status"] == "served"
        assert "batching" not in matrix[name]


def test_the_families_in_scope_run_on_the_cpus_native_paths(matrix):
    # Served 4 bits through them, as mlx-lm's generate_step computes the same weights.
    fused = ("llama", "qwen2", "qwen3", "gemma3_text", "olmo2", "phi3", "granite", "smollm3")
    for name in fused:
        assert "CPU fused layers" in matrix[name]["fast_paths"], matrix[name]
        assert matrix[name]["scenarios"]["4-bit batch"] == "ok"
    for name in ("qwen3_moe", "mixtral", "gpt_oss"):
        assert "CPU expert matmuls" in matrix[name]["fast_paths"], matrix[name]
        assert matrix[name]["scenarios"]["4-bit drafts"] == "ok"
    for name in ("qwen3_moe", "mixtral", "granitemoe", "qwen2_moe"):  # attention fused too
        assert "CPU fused layers" in matrix[name]["fast_paths"], matrix[name]
    for name in ("llama", "qwen3", "qwen2"):  # the GPU step: Llama's layer, head norms, biases
        assert "CUDA decode step" in matrix[name]["fast_paths"], matrix[name]
    for name in ("gemma3_text", "phi3", "minicpm"):  # layers or a model the step lacks
        assert "CUDA decode step" not in matrix[name]["fast_paths"], matrix[name]
    assert "not_fused" in matrix["mistral3"]  # why not, said on the page


def test_the_architectures_page_is_the_matrix_s_output(matrix):
    assert DOC.read_text() == render(matrix), (
        "docs/ARCHITECTURES.md is stale: .venv/bin/python -m tests.engine.architecture_matrix --doc"
    )
