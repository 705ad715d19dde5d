"""The CUDA decode step's glue: which models take it, and the caches it keeps as
mlx-lm keeps them. The CPU has no GPU: the step runs as `cuda_decode.Reference`, its
contract in MLX's operations; the CUDA kernels are checked against mlx-lm on a GPU
(native/cuda_decode/build.py's self-test, bench/gpu_decode_step.py)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_lm.models import llama
from mlx_lm.models.cache import KVCache

from inference.engine.acceleration import cuda_decode, fused_projections
from inference.engine.acceleration.adapters import AdapterSlot
from inference.engine.kv.rows import RowsKVCache
from tests.architecture_models import tiny_config

from .llama_blocks import greedy, tiny_llama


class Counting(cuda_decode.Reference):
    """The reference step, counting its calls (which steps the model sent to it) and
    recording whether each was asked to copy the caches before writing them."""

    calls = 0
    copies: list[bool] = []

    class Model(cuda_decode.Reference.Model):
        def step(self, *args):
            Counting.calls += 1
            Counting.copies.append(args[-1])
            return super().step(*args)


def quantized(model: llama.Model, kind: str) -> llama.Model:
    """`model` as it is ("bf16"), in 4 bits ("4-bit"), or in 4 bits with an 8-bit embedding
    ("8-bit embedding": mlx-community's 4-bit models, the default model among them)."""
    if kind != "bf16":
        embedding = 8 if kind == "8-bit embedding" else 4
        nn.quantize(model, class_predicate=lambda path, module: hasattr(module, "to_quantized")
                    and {"group_size": 32, "bits": embedding if "embed" in path else 4})  # fmt: skip
    return model


@pytest.fixture(params=["bf16", "4-bit", "8-bit embedding"])
def model(request):
    model = tiny_llama(18)
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    quantized(model, request.param)
    assert fused_projections.fuse_projections(model) == 2
    assert cuda_decode.install(model, Counting)
    Counting.calls, Counting.copies = 0, []  # after the install's check against mlx-lm
    return model


def mlx_lm(model, inputs, cache):
    """The model's own code's logits (mlx-lm's), whether or not the step is installed."""
    own = getattr(type(model), "_mlxlab_own", type(model))
    return own.__call__(model, inputs, cache=cache)


def test_the_switch(monkeypatch):
    monkeypatch.delenv(cuda_decode.VARIABLE, raising=False)
    assert cuda_decode.wanted(on_gpu=True) and not cuda_decode.wanted(on_gpu=False)
    monkeypatch.setenv(cuda_decode.VARIABLE, "0")
    assert not cuda_decode.wanted(on_gpu=True)
    monkeypatch.setenv(cuda_decode.VARIABLE, "reference")
    assert cuda_decode.wanted(on_gpu=False)


def _fused_bf16(seed: int) -> llama.Model:
    model = tiny_llama(seed)
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    assert fused_projections.fuse_projections(model) == 2
    return model


def test_the_replay_variable_reaches_the_native_step(monkeypatch):
    model = _fused_bf16(2)
    monkeypatch.setenv(cuda_decode.REPLAY_VARIABLE, "launched")
    assert cuda_decode.install(model, Counting)
    assert model._mlxlab_plan.native.replays() == "launched"
    model = _fused_bf16(2)
    monkeypatch.delenv(cuda_decode.REPLAY_VARIABLE)
    assert cuda_decode.install(model, Counting)
    assert model._mlxlab_plan.native.replays() == cuda_decode.DEFAULT_REPLAY == "kept"
    model = _fused_bf16(2)
    monkeypatch.setenv(cuda_decode.REPLAY_VARIABLE, "sometimes")
    assert not cuda_decode.install(model, Counting)  # said why in the log, served by mlx-lm
    assert type(model) is llama.Model


def _half_with_float32_norms(seed: int) -> llama.Model:
    """The default model's layout: float16 4-bit matrices and scales, float32 norms."""
    model = tiny_llama(seed)
    model.update(tree_map(lambda p: p.astype(mx.float16), model.parameters()))
    quantized(model, "4-bit")
    norms = [(path, a) for path, a in tree_flatten(model.parameters()) if a.ndim == 1]
    model.update(tree_unflatten([(path, a.astype(mx.float32)) for path, a in norms]))
    return model


def _norm_dtypes(model) -> set:
    return {a.dtype for path, a in tree_flatten(model.parameters()) if path.endswith("norm.weight")}


def test_float32_norms_beside_float16_weights_run_in_float16():
    model = _half_with_float32_norms(18)
    assert _norm_dtypes(model) == {mx.float32}
    assert fused_projections.fuse_projections(model) == 2
    Counting.calls = 0
    assert cuda_decode.install(model, Counting)
    assert _norm_dtypes(model) == {mx.float16}
    prompts = [[5, 6, 7], [8, 9]]
    assert greedy(model, prompts, 4) == _greedy_mlx_lm(model, prompts, 4)
    assert Counting.calls > 0


def test_a_model_the_step_does_not_take_keeps_its_float32_norms():
    model = _half_with_float32_norms(18)
    attention = model.model.layers[1].self_attn
    for name in ("q_proj", "k_proj", "v_proj"):  # biases the step does not add
        attention[name].bias = mx.zeros((attention[name].weight.shape[0],), mx.float16)
    before = dict(tree_flatten(model.parameters()))
    assert not cuda_decode.install(model, Counting)
    assert all(a is before[path] for path, a in tree_flatten(model.parameters()))
    assert _norm_dtypes(model) == {mx.float32}


def test_which_models_take_it():
    dense = tiny_llama(1)
    assert not cuda_decode.eligible(dense)  # float32
    dense.update(tree_map(lambda p: p.astype(mx.bfloat16), dense.parameters()))
    assert cuda_decode.eligible(dense)  # its projections fused for the step, not by class
    for bits, group, mode, takes in [(4, 64, "affine", True), (8, 32, "affine", True),
                                     (2, 32, "affine", False), (3, 32, "affine", False),
                                     (4, 32, "mxfp4", False)]:  # fmt: skip
        model = tiny_llama(2)
        model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
        nn.quantize(model, group_size=group, bits=bits, mode=mode)
        fused_projections.fuse_projections(model)
        assert cuda_decode.eligible(model) is takes, (bits, group, mode)
        assert bool(cuda_decode.install(model, Counting)) is takes
        assert type(model) is (cuda_decode.CudaDecodeModel if takes else llama.Model)


def _prefill(model, prompts, batch: bool):
    longest = max(map(len, prompts))
    pads = [longest - len(p) for p in prompts]
    caches = [RowsKVCache(pads) if batch else KVCache() for _ in model.model.layers]
    mlx_lm(model, mx.array([[0] * pad + p for pad, p in zip(pads, prompts, strict=True)]), caches)
    return caches


@pytest.mark.parametrize(
    "prompts, batch",
    [([list(range(1, 252))], False), ([[3] * 4, list(range(5, 20)), [9] * 11], True)],
    ids=["one row across a cache growth", "a left-padded batch"],
)
def test_each_step_is_mlx_lms_and_so_are_the_caches(model, prompts, batch):
    ours, theirs = _prefill(model, prompts, batch), _prefill(model, prompts, batch)
    token = mx.array([[p[-1]] for p in prompts])
    for _ in range(8):
        want = mlx_lm(model, token, theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        assert mx.allclose(got, want, atol=0.05 * mx.abs(want).max().item()).item()
        assert mx.array_equal(mx.argmax(got, -1), mx.argmax(want, -1)).item()
        token = mx.argmax(want[:, -1], axis=-1)[:, None]
    assert Counting.calls == 8
    for a, b in zip(ours, theirs, strict=True):
        assert a.keys.shape == b.keys.shape  # grown as mlx-lm grows it (256 columns at a time)
        if batch:
            assert a.idx == b.idx and mx.array_equal(a.offset, b.offset).item()
        else:
            assert a.offset == b.offset == 259
        used = (a.idx if batch else a.offset) - 1
        assert mx.allclose(a.keys[..., :used, :], b.keys[..., :used, :], atol=0.05).item()
        assert mx.allclose(a.values[..., :used, :], b.values[..., :used, :], atol=0.05).item()


def test_prefill_and_larger_batches_run_mlx_lms_model(model, monkeypatch):
    rows = cuda_decode.DEFAULT_MAX_BATCH + 1
    caches = _prefill(model, [[1, 2, 3]] * rows, batch=True)
    assert Counting.calls == 0  # the prompt's many tokens a row
    model(mx.array([[4]] * rows), cache=caches)
    assert Counting.calls == 0  # more rows than the step takes by default
    caches = _prefill(model, [[1, 2, 3]] * 9, batch=True)
    model(mx.array([[5]] * 9), cache=caches)
    assert Counting.calls == 1
    monkeypatch.setenv(cuda_decode.MAX_BATCH_VARIABLE, "8")
    object.__setattr__(model, "_mlxlab_plan", None)
    model(mx.array([[6]] * 9), cache=caches)
    assert Counting.calls == 1  # the variable lowered the limit below 9 rows
    assert greedy(model, [[5, 6, 7], [8, 9]], 4) == _greedy_mlx_lm(model, [[5, 6, 7], [8, 9]], 4)
    assert Counting.calls > 0  # mlx-lm's batch loop decoded through it


def _greedy_mlx_lm(model, prompts, tokens):
    model.__class__ = llama.Model
    try:
        return greedy(model, prompts, tokens)
    finally:
        model.__class__ = cuda_decode.CudaDecodeModel


def test_llama_3_scaled_rope_is_taken_from_the_config():
    # Llama 3.1 and 3.2 scale their RoPE: the step's periods come from the config
    # (rope_tables.py), the same for every layer; greedy tokens as mlx-lm's own model's.
    mx.random.seed(4)
    scaling = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}
    args = llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2,
                           intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                           rms_norm_eps=1e-5, vocab_size=256, rope_scaling=scaling)  # fmt: skip
    model = llama.Model(args)
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    fused_projections.fuse_projections(model)
    Counting.calls = 0
    assert cuda_decode.install(model, Counting)
    prompts = [[1, 2, 3, 4, 5], [9, 8]]
    assert greedy(model, prompts, 24) == _greedy_mlx_lm(model, prompts, 24)
    assert Counting.calls > 0
    assert model._mlxlab_plan.native.rope["freqs"] is not None


def test_a_replaced_weight_or_an_adapter_takes_effect_from_the_next_batch(model):
    caches = _prefill(model, [[1, 2, 3]], batch=False)
    model(mx.array([[4]]), cache=caches)
    plan = model._mlxlab_plan
    head = model.model.embed_tokens
    head.weight = head.weight * 2
    model(mx.array([[5]]), cache=caches)
    assert model._mlxlab_plan is plan  # a batch decoding goes on on the weights it began with
    caches = _prefill(model, [[1, 2, 3]], batch=False)
    model(mx.array([[4]]), cache=caches)
    assert model._mlxlab_plan is not plan and model._mlxlab_plan.sources[0] is head.weight
    calls = Counting.calls
    attention = model.model.layers[0].self_attn
    slot = AdapterSlot(attention.q_proj)
    slot.updates["a"] = lambda x: mx.ones((*x.shape[:-1], 64), x.dtype)
    attention.q_proj = slot
    model(mx.array([[6]]), cache=_prefill(model, [[1, 2, 3]], batch=False))
    assert Counting.calls == calls + 1  # an adapter slot with nothing active: still the step
    object.__setattr__(slot, "active", ("a",))  # an adapter in use: mlx-lm's blocks run
    model(mx.array([[7]]), cache=_prefill(model, [[1, 2, 3]], batch=False))
    assert Counting.calls == calls + 1


def test_a_batch_walks_the_layers_only_after_something_under_the_model_changed(model, monkeypatch):
    walks = []
    fused = fused_projections.FusedProjectionsBlock._fused
    monkeypatch.setattr(fused_projections.FusedProjectionsBlock, "_fused",
                        lambda block: walks.append(block) or fused(block))  # fmt: skip
    for token in (4, 5):
        caches = _prefill(model, [[1, 2, token]], batch=False)
        walks.clear()
        model(mx.array([[token]]), cache=caches)
        model(mx.array([[token]]), cache=caches)
        assert walks == []  # nothing changed: the plan as it was
    assert Counting.calls == 4
    attention = model.model.layers[1].self_attn
    attention.o_proj.bias = mx.zeros((attention.o_proj.weight.shape[0],), mx.bfloat16)
    logits = model(mx.array([[6]]), cache=_prefill(model, [[1, 2, 3]], batch=False))
    assert len(walks) >= 1 and Counting.calls == 4  # a bias added: mlx-lm's model ran
    del attention.o_proj["bias"]
    caches = _prefill(model, [[1, 2, 3]], batch=False)
    model(mx.array([[7]]), cache=caches)
    model(mx.array([[8]]), cache=caches)
    assert Counting.calls == 6 and logits.shape == (1, 1, model.args.vocab_size)


def test_caches_are_written_in_place_only_while_the_step_owns_them(model):
    caches = _prefill(model, [[1, 2, 3]], batch=False)
    for token in (4, 5, 6):
        model(mx.array([[token]]), cache=caches)
    # The prefilled caches are mlx-lm's (others may hold them): copied once, then in place.
    assert Counting.copies == [True, False, False]
    for cache in caches:
        cache.trim(2)  # a rewind, as after rejected draft tokens
    model(mx.array([[7]]), cache=caches)
    model(mx.array([[8]]), cache=caches)
    assert Counting.copies[3:] == [True, False]  # a view taken before may cover the column
    merged = _prefill(model, [[1, 2, 3], [4, 5]], batch=True)
    model(mx.array([[9], [10]]), cache=merged)
    assert Counting.copies[5:] == [True]


def _tiny(model_type: str, seed: int = 7, kind: str = "bf16", **changes) -> nn.Module:
    """A tiny random `model_type` in bfloat16 (or quantized: `quantized`), its norms' weights
    random too, so that a norm the step left out would show."""
    import importlib

    config = {**tiny_config(model_type), "vocab_size": 256, **changes}
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    model.update(tree_map(lambda p: p.astype(mx.bfloat16), model.parameters()))
    norms = [(path, 1 + 0.5 * mx.random.normal(a.shape).astype(mx.bfloat16))
             for path, a in tree_flatten(model.parameters()) if path.endswith("norm.weight")]  # fmt: skip
    model.update(tree_unflatten(norms))
    return quantized(model, kind)


def _own_greedy(model, prompts, tokens):
    own = type(model)._mlxlab_own
    installed, model.__class__ = type(model), own
    try:
        return greedy(model, prompts, tokens)
    finally:
        model.__class__ = installed


# What each family adds to Llama's layer, which the step reads after each layer's other
# weights: Qwen3's RMSNorm on each query and key head before RoPE, Qwen2's q/k/v biases.
FAMILIES = {
    "qwen3": ({"head_dim": 32, "tie_word_embeddings": True}, ("q/k head norms",)),
    "qwen2": ({"tie_word_embeddings": True}, ("q/k/v biases",)),
}


@pytest.mark.parametrize("kind", ["bf16", "4-bit"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_families_beyond_llama_take_the_step(family, kind):
    # 64 greedy tokens of two rows batched are mlx-lm's own model's, and each step's logits.
    changes, extras = FAMILIES[family]
    model = _tiny(family, kind=kind, **changes)
    Counting.calls = 0
    assert cuda_decode.install(model, Counting)
    assert type(model)._mlxlab_own.__module__ == f"mlx_lm.models.{family}"
    assert model._mlxlab_shape.extras == extras
    native = model._mlxlab_plan.native
    assert (native.qk_eps, native.qkv_bias) == ((1e-5, False) if family == "qwen3" else (0, True))
    prompts = [[5, 6, 7, 8, 9], [10, 11]]
    assert greedy(model, prompts, 64) == _own_greedy(model, prompts, 64)
    assert Counting.calls > 64
    ours, theirs = _prefill(model, prompts, True), _prefill(model, prompts, True)
    token = mx.array([[9], [11]])
    for _ in range(4):
        want = mlx_lm(model, token, cache=theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        assert mx.allclose(got, want, atol=1e-3 * (1 + mx.abs(want).max().item())).item()
        token = mx.argmax(want[:, -1], axis=-1)[:, None]


def test_models_the_step_does_not_compute_keep_their_own_code():
    gemma = _tiny("gemma3_text")
    installed = cuda_decode.install(gemma, Counting)
    assert not installed and "final norm" in installed.why_not  # Gemma's: 1 + weight
    assert type(gemma).__module__ == "mlx_lm.models.gemma3_text"

    class Scaled(llama.Model):  # a model whose code adds to what its layers say: a logits scale
        def __call__(self, inputs, cache=None, input_embeddings=None):
            return 3 * super().__call__(inputs, cache=cache, input_embeddings=input_embeddings)

    scaled = _fused_bf16(3)
    scaled.__class__ = Scaled
    assert not isinstance(cuda_decode.shape_of(scaled), cuda_decode.Unfit)
    installed = cuda_decode.install(scaled, Counting)  # the install's check against its code
    assert not installed and "logits differ" in installed.why_not
    assert type(scaled) is Scaled


def test_the_load_report_says_whether_the_step_took_the_model(monkeypatch, tmp_path):
    # /stats shows it (the fast path's report): the step, or why MLX's graph runs the steps.
    from mlx_lm.utils import save_config, save_model

    from inference.engine import load_model
    from inference.engine.acceleration.dense_weights import FastPathOptions
    from tests.architecture_models import DEFAULT_TOKENIZER_DIR, TOKENIZER_FILES, build_folder

    monkeypatch.setenv(fused_projections.VARIABLE, "force")
    monkeypatch.setenv(cuda_decode.VARIABLE, "reference")
    off = FastPathOptions(enabled=False)  # the CPU's own kernels stay out of it
    llama_folder = tmp_path / "llama"
    save_model(llama_folder, _tiny("llama"))  # bfloat16, as a GPU's models are
    save_config({**tiny_config("llama"), "vocab_size": 256}, llama_folder / "config.json")
    for name in TOKENIZER_FILES:
        if (DEFAULT_TOKENIZER_DIR / name).exists():
            (llama_folder / name).write_bytes((DEFAULT_TOKENIZER_DIR / name).read_bytes())
    assert load_model(llama_folder, fast_path=off).fast_path.gpu_step == "CUDA decode step"
    gemma = load_model(
        build_folder("gemma3_text", tmp_path / "gemma", DEFAULT_TOKENIZER_DIR), fast_path=off
    )
    assert gemma.fast_path.gpu_step == (
        "MLX's graph: a final norm that is not an RMSNorm of its weight"
    )


def _native_step():
    """The built CUDA step where MLX has a GPU, else None."""
    if not (hasattr(mx, "cuda") and mx.cuda.is_available()):
        return None
    from native.cuda_decode import StepUnavailable, load

    try:
        return load()
    except StepUnavailable:
        return None


def _tiny_model_on_the_native_step(kind: str = "bf16") -> llama.Model:
    mx.random.seed(18)
    args = llama.ModelArgs(model_type="llama", hidden_size=256, num_hidden_layers=2,
                           intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                           rms_norm_eps=1e-5, vocab_size=512)  # fmt: skip
    model = llama.Model(args)  # 64-wide heads, as the kernels take
    dtype = mx.float16 if kind.endswith(" float16") else mx.bfloat16  # the default model's
    model.update(tree_map(lambda p: p.astype(dtype), model.parameters()))
    quantized(model, kind.removesuffix(" float16"))
    fused_projections.fuse_projections(model)
    assert cuda_decode.install(model, _native_step())
    return model


@pytest.mark.skipif(_native_step() is None, reason="needs an NVIDIA GPU and the built CUDA step")
@pytest.mark.parametrize("kind", ["bf16", "4-bit", "8-bit embedding", "8-bit embedding float16"])
@pytest.mark.parametrize("rows", [2, 12, 40], ids=["CUDA cores", "tensor cores", "past 32 rows"])
def test_the_native_step_is_mlx_lms_on_a_gpu(kind, rows, monkeypatch):
    # 2 rows: the CUDA-core matvecs; 12: quantized ones on tensor cores too; 40: the cuBLAS
    # path's norms and attention, quantized matrices 32 rows at a time.
    monkeypatch.setenv(cuda_decode.MAX_BATCH_VARIABLE, "64")
    model = _tiny_model_on_the_native_step(kind)
    prompts = [[3] * 4, list(range(5, 20)), *[[i % 7 + 1] * (3 + i % 5) for i in range(rows - 2)]]
    ours, theirs = _prefill(model, prompts, True), _prefill(model, prompts, True)
    token = mx.array([[p[-1]] for p in prompts])
    for _ in range(6):
        want = mlx_lm(model, token, theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        assert mx.allclose(got, want, atol=0.02 * mx.abs(want).max().item()).item()
        token = mx.argmax(want[:, -1], axis=-1)[:, None]
    assert model._mlxlab_plan.max_batch == 64  # quantized models too, since the tensor cores


@pytest.mark.skipif(_native_step() is None, reason="needs an NVIDIA GPU and the built CUDA step")
def test_the_native_step_reads_a_view_of_the_tokens_row_by_row():
    # The last column of a prompt batch is a view whose rows lie a prompt apart: read as
    # plain rows, the second row took the first prompt's second token (found on an H200:
    # logits off by the largest logit).
    model = _tiny_model_on_the_native_step()
    prompts = [[3] * 15, list(range(5, 20))]
    ours, theirs = _prefill(model, prompts, True), _prefill(model, prompts, True)
    token = mx.array(prompts)[:, -1:]
    want = mlx_lm(model, token, theirs).astype(mx.float32)
    got = model(token, cache=ours).astype(mx.float32)
    assert mx.allclose(got, want, atol=0.02 * mx.abs(want).max().item()).item()


@pytest.mark.skipif(_native_step() is None, reason="needs an NVIDIA GPU and the built CUDA step")
def test_a_step_replayed_from_a_cuda_graph_is_the_step_launched_kernel_by_kernel():
    # 250 steps after a 15-token prompt: the caches grow past 256 columns on the way, so a
    # kept graph is made again for the new buffers.
    model = _tiny_model_on_the_native_step("4-bit")
    native = model._mlxlab_plan.native
    prompts = [[3] * 4, list(range(5, 20))]
    logits = {}
    for mode in ("launched", "captured", "kept"):
        native.replay(mode)
        caches, token, steps = _prefill(model, prompts, True), mx.array([[3], [19]]), []
        for _ in range(250):
            steps.append(model(token, cache=caches))
            token = mx.argmax(steps[-1][:, -1], axis=-1)[:, None]
        logits[mode] = mx.concatenate(steps)
        assert native.replays() == mode  # capturing did not fail over to launches
    native.replay(cuda_decode.DEFAULT_REPLAY)
    assert mx.array_equal(logits["captured"], logits["launched"]).item()
    assert mx.array_equal(logits["kept"], logits["launched"]).item()


@pytest.mark.skipif(_native_step() is None, reason="needs an NVIDIA GPU and the built CUDA step")
@pytest.mark.parametrize("kind", ["bf16", "4-bit"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_native_step_is_each_familys_on_a_gpu(family, kind):
    changes = {**FAMILIES[family][0], "head_dim": 128, "hidden_size": 256}
    model = _tiny(family, kind=kind, **changes)
    assert cuda_decode.install(model, _native_step())
    prompts = [[3] * 4, list(range(5, 20))]
    ours, theirs = _prefill(model, prompts, True), _prefill(model, prompts, True)
    token = mx.array([[p[-1]] for p in prompts])
    for _ in range(6):
        want = mlx_lm(model, token, cache=theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        assert mx.allclose(got, want, atol=0.02 * mx.abs(want).max().item()).item()
        token = mx.argmax(want[:, -1], axis=-1)[:, None]
    if kind == "bf16":
        # In 4 bits MLX's matmul and the step's sum in other orders, and a near tie flipped
        # one row's 8th token on an H100 (logits within 1.6% of the largest, as above).
        prompts = [[5, 6, 7, 8, 9], [10, 11]]
        assert greedy(model, prompts, 64) == _own_greedy(model, prompts, 64)
