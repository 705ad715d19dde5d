"""What the tests of swapped Llama blocks share (compiled_mlp.py, fused_projections.py): a
tiny random Llama, mlx-lm's own blocks for a while, the engine's batch loop run greedily,
and one decode step's logits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache

from inference.engine.loop.generator import Generator


def tiny_llama(seed: int) -> llama.Model:
    """Two layers, hidden size 64: fast enough to build per test."""
    mx.random.seed(seed)
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=256,
    )
    model = llama.Model(args)
    mx.eval(model.parameters())
    return model


def greedy(model, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """Each prompt's greedy tokens from the engine's generator, the prompts in one batch."""
    generator = Generator(model, completion_batch_size=8)
    try:
        uids = generator.insert(prompts, max_tokens=[tokens] * len(prompts))
        out: dict[int, list[int]] = {uid: [] for uid in uids}
        while len(sum(out.values(), [])) < tokens * len(prompts):
            for response in generator.next_generated():
                out[response.uid].append(response.token)
        return [out[uid] for uid in uids]
    finally:
        generator.close()


def step_logits(model) -> mx.array:
    """Logits of one decode step of three rows after a short prefill."""
    cache = make_prompt_cache(model)
    model(mx.array([[5, 6, 7]] * 3), cache=cache)
    return model(mx.array([[8], [9], [10]]), cache=cache)


@contextmanager
def mlx_lm_blocks(model, swapped: type) -> Iterator[None]:
    """The model's `swapped` blocks as mlx-lm's own for a while: the reference they must match."""
    blocks = [b for b in model.model.layers if type(b) is swapped]
    for block in blocks:
        block.__class__ = llama.TransformerBlock
    try:
        yield
    finally:
        for block in blocks:
            block.__class__ = swapped
