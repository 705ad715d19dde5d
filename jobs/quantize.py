"""The quantize job: re-quantize (or dequantize) a registered model with mlx-lm.

`validate` turns the raw params of `POST /api/jobs {"kind": "quantize"}` into a
normalised dict, rejecting everything mlx / mlx-lm would refuse later; `run` drives
`mlx_lm.convert.convert`. A source that is already quantized is first dequantized to
float16 in a temporary folder, because mlx-lm only quantizes float weights.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from . import quantize_evaluation
from .context import JobContext, JobParamsError, JobResult
from .params import (
    NAME_PATTERN,
    check_int,
    check_known,
    claimed_by_a_job,
    registered_model,
    required_string,
)

# What `mx.quantize` accepts per mode (its "Quantization modes" table), restricted to
# the bits the lab offers: mx*/nv* modes each allow exactly one (bits, group_size).
AFFINE_BITS = (2, 3, 4, 5, 6, 8)
AFFINE_GROUP_SIZES = (32, 64, 128)
FIXED_MODES = {"mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}
MODES = ("affine", *FIXED_MODES)
# mlx_lm.convert.QUANT_RECIPES, spelled out so validating imports no MLX.
RECIPES = ("mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6")
KEYS = {"model", "name", "bits", "group_size", "mode", "recipe", "dequantize", "evaluate"}
MODEL_SUBDIR = "model"
FLOAT_SUBDIR = "float16-source"  # the dequantized source, removed once quantized


def validate(params: dict) -> dict:
    """Check the raw params and return them normalised, with the source's `source_path`."""
    check_known(params, KEYS)
    model = required_string(params, "model")
    source_path = _source_folder(model)
    name = _new_name(required_string(params, "name"))
    dequantize = params.get("dequantize", False)
    if not isinstance(dequantize, bool):
        raise JobParamsError("dequantize must be true or false")
    normalised = {
        "model": model, "name": name, "dequantize": dequantize,
        "evaluate": quantize_evaluation.normalise(params.get("evaluate")),
    }  # fmt: skip
    if dequantize:  # a float16 model: the quantization params mean nothing
        normalised.update(bits=None, group_size=None, mode=None, recipe=None)
    else:
        normalised.update(quantization(params))
        _check_group_fits(model, source_path, normalised["group_size"])
    return {**normalised, "source_path": str(source_path)}


def _optional_int(params: dict, key: str) -> int | None:
    value = params.get(key)
    return None if value is None else check_int(value, key)


def _source_folder(model: str) -> Path:
    return registered_model(model)[0]


def _new_name(name: str) -> str:
    from inference.model_registry import model_exists

    if not NAME_PATTERN.fullmatch(name):
        raise JobParamsError(
            "name must be 1-200 characters of lower-case letters, digits, '-' or '_'"
        )
    if model_exists(name):
        raise JobParamsError(f"name '{name}' is already a model in the registry")
    if claimed_by_a_job(name):
        raise JobParamsError(f"name '{name}' is what another unfinished job will register")
    return name


def quantization(params: dict) -> dict:
    mode = params.get("mode", "affine")
    if mode not in MODES:  # also rejects non-strings, which are never in MODES
        raise JobParamsError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    recipe = params.get("recipe")
    if recipe is not None and recipe not in RECIPES:
        raise JobParamsError(f"recipe must be null or one of {', '.join(RECIPES)}")
    bits = _optional_int(params, "bits")
    group_size = _optional_int(params, "group_size")
    if mode in FIXED_MODES:
        if recipe is not None:
            raise JobParamsError(f"recipe works only with mode affine, not {mode}")
        bits, group_size = _fixed_mode(mode, bits, group_size)
    else:
        bits, group_size = _affine(bits, group_size)
        if recipe is not None:
            bits = None  # the recipe picks each layer's bits
    return {"bits": bits, "group_size": group_size, "mode": mode, "recipe": recipe}


def _fixed_mode(mode: str, bits: int | None, group_size: int | None) -> tuple[int, int]:
    need_bits, need_group = FIXED_MODES[mode]
    if bits not in (None, need_bits):
        raise JobParamsError(f"bits must be {need_bits} for mode {mode} (got {bits})")
    if group_size not in (None, need_group):
        raise JobParamsError(f"group_size must be {need_group} for mode {mode} (got {group_size})")
    return need_bits, need_group


def _affine(bits: int | None, group_size: int | None) -> tuple[int, int]:
    bits = 4 if bits is None else bits
    group_size = 64 if group_size is None else group_size
    if bits not in AFFINE_BITS:
        raise JobParamsError(f"bits must be one of {_listed(AFFINE_BITS)} (got {bits})")
    if group_size not in AFFINE_GROUP_SIZES:
        raise JobParamsError(
            f"group_size must be one of {_listed(AFFINE_GROUP_SIZES)} for mode affine"
            f" (got {group_size})"
        )
    return bits, group_size


def _check_group_fits(model: str, folder: Path, group_size: int) -> None:
    # mlx-lm silently skips layers whose input width the group size does not divide:
    # 4-bit group 128 on a 576-wide model would come out at ~14 bits per weight.
    config = json.loads((folder / "config.json").read_text())
    hidden = config.get("hidden_size") or config.get("text_config", {}).get("hidden_size")
    if isinstance(hidden, int) and hidden % group_size:
        raise JobParamsError(
            f"group_size {group_size} does not divide the hidden_size {hidden} of model"
            f" '{model}': most layers would stay unquantized"
        )


def _listed(values: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


def run(ctx: JobContext) -> JobResult:
    """Convert the source into `ctx.workdir / "model"` and describe what came out."""
    params, started = ctx.params, time.monotonic()
    source = Path(params["source_path"])
    ctx.progress(0.0, f"reading {params['model']}")
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"the source model folder {source} has no config.json")
    stages = conversion_plan(params, source, ctx.workdir)
    ctx.log(f"source {params['model']} at {source}: {len(stages)} conversion(s)")
    try:
        for index, (message, kwargs) in enumerate(stages):
            ctx.progress(0.05 + (_conversion_end(params) - 0.05) * index / len(stages), message)
            ctx.log(f"{message}: {kwargs['hf_path']} -> {kwargs['mlx_path']}")
            stage_started = time.monotonic()
            convert(**kwargs)
            ctx.log(f"conversion took {time.monotonic() - stage_started:.1f}s")
            ctx.check_cancelled()
    finally:
        shutil.rmtree(ctx.workdir / FLOAT_SUBDIR, ignore_errors=True)
    made = ctx.workdir / MODEL_SUBDIR
    ctx.progress(_conversion_end(params), "measuring the new model")
    summary = _summary(params, source, made)
    ctx.set_metrics(bits_per_weight=summary["bits_per_weight"], size_bytes=summary["size_bytes"])
    ctx.log(f"{params['name']}: {summary['bits_per_weight']} bits per weight")
    if params.get("evaluate"):
        summary.update(quantize_evaluation.evaluate_result(ctx, params, source, made))
    summary["seconds"] = round(time.monotonic() - started, 1)
    ctx.progress(1.0, "done")
    return JobResult(summary=summary, model=params["name"], model_subdir=MODEL_SUBDIR)


def _conversion_end(params: dict) -> float:
    # An evaluation after the conversion takes the rest of the bar from there.
    return quantize_evaluation.STAGE_START if params.get("evaluate") else 0.9


def is_quantized(folder: Path) -> bool:
    config = json.loads((folder / "config.json").read_text())
    return "quantization" in config or "quantization_config" in config


def conversion_plan(params: dict, source: Path, workdir: Path) -> list[tuple[str, dict]]:
    """The convert calls to make, each with the progress message that announces it."""
    output = workdir / MODEL_SUBDIR
    if params["dequantize"]:
        # All float16, as the job promises, even where the source kept float32 norms.
        to_float16 = {"dequantize": True, "dtype": "float16"}
        message = f"dequantizing {params['model']} to float16"
        return [(message, _call(source, output, to_float16))]
    stages = []
    if is_quantized(source):
        # Keep the source's dtypes: casting float32 norms to float16 makes the result
        # compute in float16, which MLX's CPU backend runs ~40x slower.
        floats = workdir / FLOAT_SUBDIR
        message = f"dequantizing {params['model']} first (it is already quantized)"
        stages.append((message, _call(source, floats, {"dequantize": True})))
        source = floats
    quantize = {
        "quantize": True,
        "q_bits": params["bits"],
        "q_group_size": params["group_size"],
        "q_mode": params["mode"],
        "quant_predicate": params["recipe"],
    }
    stages.append((f"quantizing to {_describe(params)}", _call(source, output, quantize)))
    return stages


def _call(source: Path, output: Path, options: dict) -> dict:
    return {"hf_path": str(source), "mlx_path": str(output), **options}


def _describe(params: dict) -> str:
    if params["recipe"]:
        return f"recipe {params['recipe']}, group {params['group_size']}"
    return f"{params['bits']}-bit {params['mode']}, group {params['group_size']}"


def convert(**kwargs) -> None:
    """mlx-lm's convert, or mlx-vlm's (the same arguments) for a model served with its
    images: mlx-lm's would leave out the vision tower. Loaded on first use."""
    # Imported here so that validating (in the web process) never loads MLX, and the
    # worker's inference.engine import can put its BLAS under MLX first.
    from inference.protocol.media import folder_media

    if folder_media(kwargs["hf_path"]):
        from mlx_vlm.convert import convert as mlx_vlm_convert

        mlx_vlm_convert(**kwargs)
        return
    from mlx_lm.convert import convert as mlx_lm_convert

    mlx_lm_convert(**kwargs)


def _summary(params: dict, source: Path, folder: Path) -> dict:
    from mlx_lm.utils import compute_bits_per_weight, load_model

    model, _ = load_model(folder, lazy=True)  # bits per weight needs shapes, not values
    return {
        "source_model": params["model"],
        "bits": params["bits"],
        "group_size": params["group_size"],
        "mode": params["mode"],
        "recipe": params["recipe"],
        "dequantized": params["dequantize"],
        "source_was_quantized": is_quantized(source),
        "bits_per_weight": round(compute_bits_per_weight(model), 3),
        "size_bytes": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()),
    }
