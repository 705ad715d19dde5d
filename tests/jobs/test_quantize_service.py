"""The quantize service: params validation, and real mlx-lm conversions of the default model.

Conversions cost seconds each on CPU, so there are four in all: the 4-bit run
(dequantize + quantize), the float16 run (one), and the recipe run from that float16
output (one, as its source is not quantized).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.model_registry import model_register
from jobs.context import JobCancelled, JobParamsError
from jobs.quantize import FLOAT_SUBDIR, run, validate
from tests.jobs.recording_context import RecordingContext

SOURCE = "smollm2-source"


@pytest.fixture
def source(db, model_folder: Path) -> Path:
    model_register(name=SOURCE, path=model_folder)
    return model_folder


def normalised(source_path: Path, **overrides) -> dict:
    """What validate returns for SOURCE, without the database (for module-scoped runs)."""
    params = {
        "model": SOURCE,
        "name": "made",
        "dequantize": False,
        "bits": 4,
        "group_size": 64,
        "mode": "affine",
        "recipe": None,
        "evaluate": None,
        "source_path": str(source_path.resolve()),
    }
    return {**params, **overrides}


def config_of(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


# --- validate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"model": "nope"}, "model 'nope' is not in the registry"),
        ({"name": SOURCE}, f"name '{SOURCE}' is already a model in the registry"),
        ({"name": "Bad Name"}, "name must be 1-200 characters"),
        ({"name": "x" * 201}, "name must be 1-200 characters"),
        ({"bits": 7}, "bits must be one of 2, 3, 4, 5, 6, 8 (got 7)"),
        ({"group_size": 16}, "group_size must be one of 32, 64, 128 for mode affine (got 16)"),
        ({"mode": "fp3"}, "mode must be one of affine, mxfp4, nvfp4, mxfp8 (got 'fp3')"),
        ({"recipe": "mixed_9_9"}, "recipe must be null or one of"),
        ({"mode": "mxfp4", "recipe": "mixed_3_6"}, "recipe works only with mode affine"),
        ({"mode": "mxfp4", "bits": 8}, "bits must be 4 for mode mxfp4 (got 8)"),
        ({"mode": "mxfp4", "group_size": 64}, "group_size must be 32 for mode mxfp4"),
        ({"mode": "nvfp4", "group_size": 32}, "group_size must be 16 for mode nvfp4"),
        ({"mode": "mxfp8", "bits": 4}, "bits must be 8 for mode mxfp8 (got 4)"),
        ({"group_size": 128}, "group_size 128 does not divide the hidden_size 576"),
        ({"colour": "red"}, "unknown param 'colour'"),
        ({"bits": True}, "bits must be an integer"),
        ({"bits": "4"}, "bits must be an integer"),
        ({"group_size": 64.0}, "group_size must be an integer"),
        ({"mode": 4}, "mode must be one of"),
        ({"dequantize": "yes"}, "dequantize must be true or false"),
        ({"dequantize": 1}, "dequantize must be true or false"),
        ({"model": 3}, "model must be a non-empty string"),
        ({"name": None}, "name is required"),
        ({"evaluate": "yes"}, 'evaluate must be true, false or {"max_examples": N}'),
        ({"evaluate": {"dataset": "builtin"}}, 'evaluate must be true, false or {"max_examples"'),
        ({"evaluate": {"max_examples": 0}}, "max_examples must be between 1 and 10000"),
    ],
)
def test_validate_rejects(source, extra, message):
    with pytest.raises(JobParamsError) as error:
        validate({"model": SOURCE, "name": "made", **extra})
    assert message in str(error.value)


def test_validate_requires_model(source):
    with pytest.raises(JobParamsError, match="model is required"):
        validate({"name": "made"})


def test_validate_rejects_non_object(db):
    with pytest.raises(JobParamsError, match="params must be a JSON object"):
        validate(["quantize"])


def test_validate_fills_defaults(source):
    assert validate({"model": SOURCE, "name": "made"}) == normalised(source)


@pytest.mark.parametrize(
    ("evaluate", "expected"),
    [(False, None), (True, {"max_examples": None}), ({"max_examples": 8}, {"max_examples": 8})],
)
def test_validate_takes_an_evaluation(source, evaluate, expected):
    params = validate({"model": SOURCE, "name": "made", "evaluate": evaluate})
    assert params["evaluate"] == expected


@pytest.mark.parametrize(
    ("mode", "bits", "group_size"), [("mxfp4", 4, 32), ("nvfp4", 4, 16), ("mxfp8", 8, 32)]
)
def test_validate_gives_fixed_modes_their_only_shape(source, mode, bits, group_size):
    params = validate({"model": SOURCE, "name": "made", "mode": mode})
    assert (params["bits"], params["group_size"]) == (bits, group_size)
    explicit = {"bits": bits, "group_size": group_size}
    assert validate({"model": SOURCE, "name": "made", "mode": mode, **explicit}) == params


def test_validate_recipe_chooses_the_bits(source):
    params = validate({"model": SOURCE, "name": "made", "recipe": "mixed_3_6", "group_size": 32})
    assert params == normalised(source, bits=None, group_size=32, recipe="mixed_3_6")


def test_validate_dequantize_ignores_quantization_params(source):
    raw = {"model": SOURCE, "name": "made", "dequantize": True, "bits": 7, "mode": "fp3"}
    assert validate(raw) == normalised(
        source, dequantize=True, bits=None, group_size=None, mode=None, recipe=None
    )


# --- run ---------------------------------------------------------------------------------


def test_cancelled_before_converting(source, tmp_path):
    ctx = RecordingContext(
        params=validate({"model": SOURCE, "name": "made"}),
        workdir=tmp_path,
        cancel_after_checks=1,
    )
    with pytest.raises(JobCancelled):
        run(ctx)
    assert list(tmp_path.iterdir()) == []


def test_quantizes_the_default_model_to_4_bit_affine(source, tmp_path):
    ctx = RecordingContext(
        params=validate({"model": SOURCE, "name": "smollm2-q4", "group_size": 64}),
        workdir=tmp_path,
    )
    result = run(ctx)

    assert (result.model, result.model_subdir) == ("smollm2-q4", "model")
    folder = tmp_path / "model"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the float16 copy is gone
    quantization = config_of(folder)["quantization"]
    assert (quantization["bits"], quantization["group_size"]) == (4, 64)
    assert quantization["mode"] == "affine"
    summary = result.summary
    assert summary["source_model"] == SOURCE and summary["source_was_quantized"]
    assert (summary["bits"], summary["group_size"], summary["mode"]) == (4, 64, "affine")
    assert summary["recipe"] is None and summary["dequantized"] is False
    assert 4.5 <= summary["bits_per_weight"] <= 5.5
    assert summary["size_bytes"] == sum(f.stat().st_size for f in folder.rglob("*"))
    messages = [message for _, message in ctx.progress_reports]
    assert any(message.startswith("dequantizing") for message in messages)
    assert any(message.startswith("quantizing to 4-bit affine") for message in messages)
    assert ctx.progress_reports[-1] == (1.0, "done")
    assert ctx.values["bits_per_weight"] == summary["bits_per_weight"]

    import mlx.core as mx
    import mlx_lm

    # The source's float32 norms survive the float copy: all-float16 quantized models
    # run ~40x slower on MLX's CPU backend.
    weights = mx.load(str(folder / "model.safetensors"))
    assert weights["model.norm.weight"].dtype == mx.float32
    model, tokenizer = mlx_lm.load(str(folder))
    text = mlx_lm.generate(model, tokenizer, "The capital of France is", max_tokens=5)
    assert text.strip(), "the quantized model generated nothing"
    print(f"4-bit model: {text!r}, {summary}")


@pytest.fixture(scope="module")
def float16_run(model_folder, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("float16")
    params = normalised(
        model_folder, name="smollm2-f16", dequantize=True, bits=None, group_size=None,
        mode=None, recipe=None,
    )  # fmt: skip
    ctx = RecordingContext(params=params, workdir=workdir)
    return ctx, run(ctx), workdir / "model"


def test_dequantize_makes_a_float16_model(float16_run):
    import mlx.core as mx

    ctx, result, folder = float16_run
    config = config_of(folder)
    assert "quantization" not in config and "quantization_config" not in config
    dtypes = {value.dtype for value in mx.load(str(folder / "model.safetensors")).values()}
    assert dtypes == {mx.float16}
    assert result.summary["dequantized"] is True and result.summary["bits_per_weight"] == 16
    assert [m for _, m in ctx.progress_reports if m.startswith("dequantizing")] == [
        f"dequantizing {SOURCE} to float16"
    ]
    print(f"float16 model: {result.summary}")


def test_recipe_from_a_float_source_quantizes_in_one_step(float16_run, tmp_path):
    _, _, float_folder = float16_run
    params = normalised(float_folder, name="smollm2-mixed", bits=None, recipe="mixed_3_6")
    ctx = RecordingContext(params=params, workdir=tmp_path)
    result = run(ctx)

    assert not (tmp_path / FLOAT_SUBDIR).exists()
    assert not any(m.startswith("dequantizing") for _, m in ctx.progress_reports)
    quantization = config_of(tmp_path / "model")["quantization"]
    layer_bits = {v["bits"] for v in quantization.values() if isinstance(v, dict)}
    assert layer_bits == {3, 6}
    assert quantization["model.layers.0.mlp.down_proj"]["bits"] == 6
    assert quantization["model.layers.6.mlp.down_proj"]["bits"] == 3
    summary = result.summary
    assert summary["recipe"] == "mixed_3_6" and summary["source_was_quantized"] is False
    assert 3.5 <= summary["bits_per_weight"] <= 5
    print(f"mixed_3_6 model: {summary}")


def test_two_jobs_never_race_to_one_name(source, tmp_path):
    """A name an unfinished job will register is refused at submission; at registration,
    a name held by another folder is refused, never silently repointed."""
    from inference.model_registry import NameTaken
    from jobs.models import Job

    Job.objects.create(kind="quantize", params={"model": SOURCE, "name": "made"})
    with pytest.raises(JobParamsError, match="another unfinished job will register"):
        validate({"model": SOURCE, "name": "made"})
    Job.objects.update(status="succeeded")
    assert validate({"model": SOURCE, "name": "made"})["name"] == "made"
    with pytest.raises(NameTaken, match=f"a model named '{SOURCE}' is already registered"):
        model_register(name=SOURCE, path=tmp_path, replace=False)
    assert model_register(name=SOURCE, path=source, replace=False).path == str(source.resolve())
