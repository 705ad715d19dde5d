"""Zero heads added so that two ranks can shard the default model change nothing it computes."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm import load

from inference.engine.acceleration.head_padding import extra_kv_heads, shardable_path


def test_the_fewest_heads_are_added_that_the_ranks_divide(model_folder):
    config = json.loads((model_folder / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert [extra_kv_heads(config, ranks) for ranks in (1, 2, 3, 4)] == [0, 1, 0, 1]
    # Any multiple of 5 key-value heads means a query-head count that 576 does not divide.
    with pytest.raises(ValueError, match="5 ranks share 9 query and 3 key-value heads"):
        extra_kv_heads(config, 5)


def test_a_padded_copy_computes_what_the_model_does(model_folder, tmp_path):
    assert shardable_path(model_folder, 3, tmp_path) == model_folder
    padded = shardable_path(model_folder, 2, tmp_path)
    assert padded.parent == tmp_path and padded != model_folder
    config = json.loads((padded / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (12, 4)
    written = (padded / "model.safetensors").stat().st_mtime_ns
    assert shardable_path(model_folder, 2, tmp_path) == padded  # made once, then reused
    assert (padded / "model.safetensors").stat().st_mtime_ns == written
    assert list(tmp_path.iterdir()) == [padded]  # no scratch folder left behind

    tokens = mx.array([[1, 504, 3458, 282, 4649, 314, 253, 1028, 30]])
    (model, _), (wider, _) = load(str(model_folder)), load(str(padded))
    assert wider.layers[0].self_attn.n_heads == 12
    expected, got = model(tokens), wider(tokens)
    assert mx.array_equal(mx.argmax(expected, -1), mx.argmax(got, -1))
    assert mx.allclose(expected, got, atol=1e-3).item()
