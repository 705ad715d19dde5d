"""The finetune job: LoRA, DoRA or full fine-tuning of a registered model with mlx-lm.

`validate` turns the raw params of `POST /api/jobs {"kind": "finetune"}` into a
normalised dict, reading the dataset files so that anything mlx-lm's trainer would
fail on later (a missing split, a bad line, too few validation examples) is a 400
now. `run` hands over to `finetune_training`, imported only then so that validating
in the web process does not load the training stack.
"""

from __future__ import annotations

import math
from pathlib import Path

from access.server_paths import confined_path

from .context import JobContext, JobParamsError, JobResult
from .finetune_data import check_dataset
from .params import (
    NAME_PATTERN,
    check_int,
    check_known,
    claimed_by_a_job,
    dataset_job_folder,
    registered_model,
    required_string,
)

FINE_TUNE_TYPES = ("lora", "dora", "full")
# Every refusal of a dataset.path reads the same, so it tells nothing of the server's files.
DATASET_PATH_REFUSED = "dataset.path must name a folder inside MLXLAB_IMPORT_ROOTS"
# mlx.optimizers.schedulers whose arguments are numbers (join_schedules takes schedules),
# spelled out so validating imports no MLX.
SCHEDULES = ("cosine_decay", "exponential_decay", "linear_schedule", "step_decay")
DEFAULTS = {
    "fine_tune_type": "lora",
    "iters": 100,
    "batch_size": 4,
    "learning_rate": 1e-5,
    "lr_schedule": None,
    "num_layers": 16,
    "max_seq_length": 2048,
    "mask_prompt": False,
    "grad_checkpoint": False,
    "steps_per_eval": 200,
    "steps_per_report": 10,
    "steps_per_save": 100,
    "val_batches": 25,
    "seed": 0,
    "fuse": False,
    "adapter_name": None,
    "fused_name": None,
}
LORA_DEFAULTS = {"rank": 8, "scale": 20.0, "dropout": 0.0}
# (low, high) for the integer params.
INT_RANGES = {
    "iters": (1, 100_000),
    "batch_size": (1, 1024),
    "max_seq_length": (2, 1_000_000),
    "steps_per_eval": (1, 100_000),
    "steps_per_report": (1, 100_000),
    "steps_per_save": (1, 100_000),
    "seed": (0, 2**32 - 1),  # numpy's seed range
}
# Keys validate() adds; accepted back (and recomputed) so validating twice is harmless.
DERIVED = ("model_path", "dataset_path", "dataset_format", "train_examples", "valid_examples")
KEYS = {"model", "dataset", "lora", *DEFAULTS, *DERIVED}


def validate(params: dict) -> dict:
    """Check the raw params; return them with defaults, `model_path` and `dataset_path`."""
    check_known(params, KEYS)
    model, model_path, model_config = _model(params.get("model"))
    normalised = {"model": model, **DEFAULTS}
    normalised.update(_numbers(params))
    normalised.update(_flags(params))
    normalised["fine_tune_type"] = _fine_tune_type(params.get("fine_tune_type", "lora"))
    normalised["lr_schedule"] = _schedule(params.get("lr_schedule"))
    normalised["lora"] = _lora(params.get("lora"))
    normalised["num_layers"] = _num_layers(params.get("num_layers"), model_config)
    _check_full_on_quantized(normalised["fine_tune_type"], model, model_config)
    normalised.update(_names(params, normalised["fine_tune_type"], normalised["fuse"]))
    dataset, dataset_path = _dataset(params.get("dataset"))
    facts = check_dataset(dataset_path, normalised["batch_size"], normalised["mask_prompt"])
    return {
        **normalised,
        "dataset": dataset,
        "model_path": str(model_path),
        "dataset_path": str(dataset_path),
        **facts,
    }


def run(ctx: JobContext) -> JobResult:
    """Train on a worker; see `finetune_training.run`."""
    from .finetune_training import run as train_run

    return train_run(ctx)


def _model(model) -> tuple[str, Path, dict]:
    name = required_string({"model": model}, "model")
    return (name, *registered_model(name))


def _integer(value, key: str, low: int, high: int) -> int:
    check_int(value, key)
    if not low <= value <= high:
        raise JobParamsError(f"{key} must be between {low} and {high}")
    return value


def _number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JobParamsError(f"{key} must be a number")
    return float(value)


def _numbers(params: dict) -> dict:
    numbers = {
        key: _integer(params.get(key, DEFAULTS[key]), key, *bounds)
        for key, bounds in INT_RANGES.items()
    }
    val_batches = _integer(
        params.get("val_batches", DEFAULTS["val_batches"]), "val_batches", -1, 100_000
    )
    if val_batches == 0:
        raise JobParamsError("val_batches must be -1 (all) or at least 1")
    learning_rate = _number(params.get("learning_rate", DEFAULTS["learning_rate"]), "learning_rate")
    if not 0 < learning_rate <= 1:
        raise JobParamsError("learning_rate must be above 0 and at most 1")
    return {**numbers, "val_batches": val_batches, "learning_rate": learning_rate}


def _flags(params: dict) -> dict:
    flags = {}
    for key in ("mask_prompt", "grad_checkpoint", "fuse"):
        flags[key] = params.get(key, DEFAULTS[key])
        if not isinstance(flags[key], bool):
            raise JobParamsError(f"{key} must be true or false")
    return flags


def _fine_tune_type(value) -> str:
    if value not in FINE_TUNE_TYPES:
        raise JobParamsError(f"fine_tune_type must be one of {', '.join(FINE_TUNE_TYPES)}")
    return value


def _schedule(schedule) -> dict | None:
    """A config for mlx-lm's build_schedule, checked by building it."""
    if schedule is None:
        return None
    if not isinstance(schedule, dict):
        raise JobParamsError("lr_schedule must be null or an object")
    unknown = sorted(set(schedule) - {"name", "arguments", "warmup", "warmup_init"})
    if unknown:
        raise JobParamsError(f"unknown lr_schedule key '{unknown[0]}'")
    name = schedule.get("name")
    if name not in SCHEDULES:
        raise JobParamsError(f"lr_schedule.name must be one of {', '.join(SCHEDULES)}")
    arguments = schedule.get("arguments")
    if not isinstance(arguments, list) or not arguments:
        raise JobParamsError("lr_schedule.arguments must be a non-empty list of numbers")
    for value in arguments:
        _number(value, "lr_schedule.arguments[]")  # kept as given: step counts stay ints
    warmup = _integer(schedule.get("warmup", 0), "lr_schedule.warmup", 0, 100_000)
    warmup_init = _number(schedule.get("warmup_init", 0.0), "lr_schedule.warmup_init")
    config = {"name": name, "arguments": arguments, "warmup": warmup, "warmup_init": warmup_init}
    _build_schedule(config)
    return config


def _build_schedule(config: dict) -> None:
    # Validating a schedule runs mlx-lm's, in whichever process validates.
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()
    from mlx_lm.tuner.utils import build_schedule

    try:
        schedule = build_schedule(config)
        rate = float(schedule(0))
    except (TypeError, ValueError) as error:
        raise JobParamsError(f"lr_schedule does not fit {config['name']}: {error}") from None
    if not math.isfinite(rate) or rate < 0:
        raise JobParamsError("lr_schedule gives a learning rate that is not a finite number >= 0")


def _lora(lora) -> dict:
    if lora is None:
        return dict(LORA_DEFAULTS)
    if not isinstance(lora, dict):
        raise JobParamsError("lora must be an object of rank, scale and dropout")
    unknown = sorted(set(lora) - set(LORA_DEFAULTS))
    if unknown:
        raise JobParamsError(f"unknown lora key '{unknown[0]}'")
    rank = _integer(lora.get("rank", LORA_DEFAULTS["rank"]), "lora.rank", 1, 1024)
    scale = _number(lora.get("scale", LORA_DEFAULTS["scale"]), "lora.scale")
    dropout = _number(lora.get("dropout", LORA_DEFAULTS["dropout"]), "lora.dropout")
    if scale <= 0:
        raise JobParamsError("lora.scale must be above 0")
    if not 0 <= dropout < 1:
        raise JobParamsError("lora.dropout must be at least 0 and below 1")
    return {"rank": rank, "scale": scale, "dropout": dropout}


def _num_layers(value, config: dict) -> int:
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    layers = config.get("num_hidden_layers") or text_config.get("num_hidden_layers")
    known = isinstance(layers, int) and not isinstance(layers, bool)
    if value is None:  # the default fits small models rather than failing on them
        return min(DEFAULTS["num_layers"], layers) if known else DEFAULTS["num_layers"]
    num_layers = _integer(value, "num_layers", -1, 100_000)
    # mlx-lm slices layers[-num_layers:]: 0 would silently mean every layer.
    if num_layers == 0:
        raise JobParamsError("num_layers must be -1 (all) or at least 1")
    # mlx-lm refuses more layers than the model has, but only once training starts.
    if known and num_layers > layers:
        raise JobParamsError(f"num_layers is {num_layers} but the model has only {layers} layers")
    return num_layers


def _check_full_on_quantized(fine_tune_type: str, model: str, config: dict) -> None:
    # Unfreezing a QuantizedLinear would ask for gradients of packed integer weights.
    if fine_tune_type == "full" and ("quantization" in config or "quantization_config" in config):
        raise JobParamsError(
            f"fine_tune_type full needs an unquantized model and '{model}' is quantized;"
            " use lora or dora"
        )


def _names(params: dict, fine_tune_type: str, fuse: bool) -> dict:
    from inference.model_registry import model_exists
    from inference.models import Adapter

    adapter_name = params.get("adapter_name")
    fused_name = params.get("fused_name")
    for key, value in (("adapter_name", adapter_name), ("fused_name", fused_name)):
        if value is not None and (not isinstance(value, str) or not NAME_PATTERN.fullmatch(value)):
            raise JobParamsError(f"{key} must be 1-200 of a-z, 0-9, '-' and '_'")
    if fine_tune_type == "full" and fuse:
        raise JobParamsError(
            "fuse applies to lora and dora; full fine-tuning makes a whole model already"
            " (name it with fused_name)"
        )
    if fuse and fused_name is None:
        raise JobParamsError("fused_name is required when fuse is true")
    if fused_name is not None and not fuse and fine_tune_type != "full":
        raise JobParamsError("fused_name is set but fuse is false")
    if adapter_name and Adapter.objects.filter(name=adapter_name).exists():
        raise JobParamsError(f"adapter_name '{adapter_name}' is taken by another adapter")
    for key, name in (("adapter_name", adapter_name), ("fused_name", fused_name)):
        if name and claimed_by_a_job(name):
            raise JobParamsError(f"{key} '{name}' is what another unfinished job will register")
    # A full fine-tune registers a model under fused_name, else under adapter_name.
    model_name = fused_name or (adapter_name if fine_tune_type == "full" else None)
    if model_name and model_exists(model_name):
        key = "fused_name" if fused_name else "adapter_name"
        raise JobParamsError(f"{key} '{model_name}' is taken by another model")
    return {"adapter_name": adapter_name, "fused_name": fused_name}


def _dataset(dataset) -> tuple[dict, Path]:
    if dataset is None:
        raise JobParamsError("dataset is required")
    if not isinstance(dataset, dict) or len(dataset) != 1 or not set(dataset) <= {"job", "path"}:
        raise JobParamsError('dataset must be {"job": "<dataset job id>"} or {"path": "/folder"}')
    if "job" in dataset:
        return {"job": str(dataset["job"])}, dataset_job_folder(dataset["job"])
    path = dataset["path"]
    folder = confined_path(path, kind="folder")
    if folder is None:
        raise JobParamsError(DATASET_PATH_REFUSED)
    return {"path": path}, folder
