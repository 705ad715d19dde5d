# ruff: noqa: E402, I001  (the process is prepared before anything imports mlx.core)
"""The finetune job's worker side: mlx-lm's trainer, reporting through the JobContext.

mlx-lm's `lora.run` is not used: it replaces the callback it is given. This drives
`mlx_lm.tuner.trainer.train` directly with the same pieces (linear_to_lora_layers,
build_schedule, its dataset classes, save_config, the layers' own `fuse`), adding
what the lab needs: cooperative cancelling before every batch, a copy of the adapter
at its best validation loss, a last validation of the weights actually saved, and
training a quantized base on dense float32 twins of its weights on the CPU.
"""

from __future__ import annotations

from inference.engine.process.startup import prepare_mlx_process

# A job worker's child prepared itself (mlxlab/celery.py); a process importing this
# module for its own use must be, too, before mlx.core comes in below.
prepare_mlx_process()

import math
import re
import time
import types
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_lm import load
from mlx_lm.tuner.datasets import CacheDataset, create_dataset
from mlx_lm.tuner.trainer import TrainingArgs, TrainingCallback, evaluate, iterate_batches, train
from mlx_lm.tuner.utils import build_schedule, linear_to_lora_layers
from mlx_lm.utils import dequantize_model, get_total_parameters, save, save_config

from inference.engine.acceleration.cpu_fast_path import blas_state
from inference.engine.acceleration.dense_weights import dense_bytes, quantized_layers
from labsettings import lab_settings

from .context import JobContext, JobResult
from .finetune_data import SPLITS, read_jsonl

ADAPTER_FILE = "adapters.safetensors"
BEST_FILE = "best_adapters.safetensors"
FUSED_SUBDIR = "fused"
MODEL_SUBDIR = "model"
CHECKPOINT = re.compile(r"\d{7}_adapters\.safetensors")  # mlx-lm's numbered saves


class JobCallback(TrainingCallback):
    """Forwards mlx-lm's reports to the job and keeps the best adapter seen so far."""

    def __init__(self, ctx: JobContext, model, iters: int) -> None:
        self.ctx, self.model, self.iters = ctx, model, iters
        self.started = time.monotonic()
        self.last_train: dict = {}
        self.last_val_loss: float | None = None
        self.best_val_loss = math.inf
        self.best_iteration: int | None = None
        self.train_seconds = 0.0

    def on_train_loss_report(self, train_info: dict) -> None:
        it, loss = train_info["iteration"], train_info["train_loss"]
        self.last_train = train_info
        self.ctx.metric("train_loss", it, loss)
        self.ctx.set_metrics(
            learning_rate=train_info["learning_rate"],
            tokens_per_second=round(train_info["tokens_per_second"], 1),
            peak_memory_gb=round(train_info["peak_memory"], 3),
            trained_tokens=train_info["trained_tokens"],
            iteration=it,
        )
        self.ctx.log(
            f"iteration {it}: train loss {loss:.4f}, lr {train_info['learning_rate']:.3g},"
            f" {train_info['tokens_per_second']:.0f} tokens/s"
        )
        # Wall time per iteration so far, evaluations included: they recur at the same pace.
        eta = (time.monotonic() - self.started) / it * (self.iters - it)
        self.ctx.progress(it / self.iters, f"iteration {it}/{self.iters}", eta_seconds=eta)

    def on_val_loss_report(self, val_info: dict) -> None:
        self.record_val(val_info["iteration"], val_info["val_loss"])
        self.ctx.check_cancelled()

    def record_val(self, it: int, val_loss: float) -> None:
        self.last_val_loss = val_loss
        self.ctx.metric("val_loss", it, val_loss)
        message = f"iteration {it}: val loss {val_loss:.4f}"
        # mlx-lm keeps only the last adapter; the best one may be earlier if it overfits.
        if val_loss < self.best_val_loss:
            self.best_val_loss, self.best_iteration = val_loss, it
            weights = dict(tree_flatten(self.model.trainable_parameters()))
            mx.save_safetensors(str(self.ctx.workdir / BEST_FILE), weights)
            self.ctx.set_metrics(best_val_loss=val_loss, best_iteration=it)
            message += " (best so far)"
        self.ctx.log(message)


def run(ctx: JobContext) -> JobResult:
    """Train, then save an adapter (lora/dora, optionally fused) or a whole model (full)."""
    params, started = ctx.params, time.monotonic()
    adapter_name = params["adapter_name"] or default_adapter_name(params["model"], ctx.job_id)
    ctx.progress(0.0, f"loading {params['model']}")
    model, tokenizer, config = load(params["model_path"], return_config=True)
    weights = _training_weights(ctx, model)
    # As mlx-lm's lora.run seeds numpy (batch order) and train_model seeds MLX (LoRA init).
    np.random.seed(params["seed"])
    mx.random.seed(params["seed"])
    _prepare(model, params)
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    ctx.log(f"trainable parameters: {trainable:,} of {get_total_parameters(model):,}")
    _write_adapter_config(ctx.workdir, params)
    ctx.progress(0.0, "reading the dataset")
    train_set, valid_set = _datasets(params, tokenizer)
    callback = JobCallback(ctx, model, params["iters"])
    _train(ctx, model, params, train_set, valid_set, callback)
    ctx.progress(1.0, "validating the final weights")
    callback.record_val(params["iters"], _evaluate(ctx, model, params, valid_set))
    summary = _summary(params, callback, trainable, adapter_name, time.monotonic() - started)
    summary["training_weights"] = weights
    if params["fine_tune_type"] == "full":
        return _save_model(ctx, model, tokenizer, config, params, adapter_name, summary)
    del model, callback  # the fuse reloads the base as stored; free the training copy first
    return _save_adapter(ctx, params, adapter_name, summary)


def default_adapter_name(model: str, job_id: str) -> str:
    """The model's name, "-", and the job id's first 8 characters; at most 200 in all."""
    suffix = "-" + str(job_id).replace("-", "")[:8].lower()
    return model[: 200 - len(suffix)] + suffix


def _training_weights(ctx: JobContext, model) -> str:
    """Train a quantized model on dense float32 twins of its weights when the CPU allows.

    MLX's Linux CPU build runs quantized matmuls in scalar code: ~20x slower than the
    float32 ones OpenBLAS runs (0.03 vs 0.66 iterations/s for the default model here).
    The dense weights are the quantized ones dequantized, so the adapter learns exactly
    what it would on the quantized layers, and loads onto them unchanged. The engine's
    fast-path switch and memory budget decide, as they do for inference.
    """
    layers = quantized_layers(model)
    if not layers:
        return "as stored"
    needed = sum(dense_bytes(module) for _, module in layers)
    budget = lab_settings.dense_weight_budget_mb << 20
    if not lab_settings.cpu_fast_path:
        why = "the CPU fast path is turned off (MLXLAB_CPU_FAST_PATH=0)"
    elif mx.default_device() != mx.cpu:
        why = f"the device is {mx.default_device()}, not the CPU"
    elif not blas_state().loaded:
        why = blas_state().reason
    elif needed > budget:
        why = f"dense weights need {needed >> 20} MB, over the {budget >> 20} MB budget"
    else:
        dequantize_model(model)
        model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
        mx.eval(model.parameters())
        ctx.log(f"training on dense float32 weights ({needed >> 20} MB): the CPU fast path")
        return "dense float32"
    ctx.log(f"training on the quantized weights: {why}")
    return "quantized"


def _prepare(model, params: dict) -> None:
    """Freeze the base and make trainable what the fine-tune type trains, as mlx-lm does."""
    model.freeze()
    if params["fine_tune_type"] == "full":
        for layer in model.layers[-max(params["num_layers"], 0) :]:
            layer.unfreeze()
    else:
        linear_to_lora_layers(
            model,
            params["num_layers"],
            params["lora"],
            use_dora=params["fine_tune_type"] == "dora",
        )


def _write_adapter_config(workdir: Path, params: dict) -> None:
    # What mlx-lm's lora.py writes (vars(args)): load_adapters reads fine_tune_type,
    # num_layers and lora_parameters; the rest records how the adapter was made.
    full = params["fine_tune_type"] == "full"
    save_config(
        {
            "model": params["model_path"],
            "base_model": params["model"],
            "fine_tune_type": params["fine_tune_type"],
            "num_layers": params["num_layers"],
            "lora_parameters": None if full else dict(params["lora"]),
            "data": params["dataset_path"],
            "train": True,
            "optimizer": "adam",
            "batch_size": params["batch_size"],
            "iters": params["iters"],
            "learning_rate": params["learning_rate"],
            "lr_schedule": params["lr_schedule"],
            "max_seq_length": params["max_seq_length"],
            "mask_prompt": params["mask_prompt"],
            "grad_checkpoint": params["grad_checkpoint"],
            "steps_per_eval": params["steps_per_eval"],
            "steps_per_report": params["steps_per_report"],
            "save_every": params["steps_per_save"],
            "val_batches": params["val_batches"],
            "seed": params["seed"],
        },
        workdir / "adapter_config.json",
    )


def _datasets(params: dict, tokenizer) -> tuple[CacheDataset, CacheDataset]:
    # mlx-lm's create_dataset picks chat / completions / text from the first example,
    # as its local loader does; reading the lines here skips blank ones.
    folder = Path(params["dataset_path"])
    options = types.SimpleNamespace(mask_prompt=params["mask_prompt"])
    return tuple(
        CacheDataset(create_dataset(read_jsonl(folder / f"{split}.jsonl"), tokenizer, options))
        for split in SPLITS
    )


def _cancellable(ctx: JobContext):
    """mlx-lm's batch iterator, checking for a cancel before every batch it yields."""

    def batches(*args, **kwargs):
        for batch in iterate_batches(*args, **kwargs):
            ctx.check_cancelled()
            yield batch

    return batches


def _train(ctx: JobContext, model, params: dict, train_set, valid_set, callback) -> None:
    args = TrainingArgs(
        batch_size=params["batch_size"],
        iters=params["iters"],
        val_batches=params["val_batches"],
        steps_per_report=params["steps_per_report"],
        steps_per_eval=params["steps_per_eval"],
        steps_per_save=params["steps_per_save"],
        max_seq_length=params["max_seq_length"],
        adapter_file=str(ctx.workdir / ADAPTER_FILE),
        grad_checkpoint=params["grad_checkpoint"],
    )
    schedule = params["lr_schedule"]
    optimizer = optim.Adam(
        learning_rate=build_schedule(schedule) if schedule else params["learning_rate"]
    )
    # mlx-lm's grad_checkpoint patches the layer class itself, for the whole process:
    # put it back so later jobs and inference in this worker run unpatched.
    layer_type = type(model.layers[0])
    own_call = vars(layer_type).get("__call__")
    mx.reset_peak_memory()
    callback.started = time.monotonic()
    try:
        train(
            model=model,
            optimizer=optimizer,
            train_dataset=train_set,
            val_dataset=valid_set,
            args=args,
            iterate_batches=_cancellable(ctx),
            training_callback=callback,
        )
    finally:
        if own_call is not None:
            layer_type.__call__ = own_call
        elif "__call__" in vars(layer_type):  # it was inherited: drop the patch
            del layer_type.__call__
    callback.train_seconds = time.monotonic() - callback.started


def _evaluate(ctx: JobContext, model, params: dict, valid_set) -> float:
    # train() validates before its last step; this measures the weights it saved.
    return evaluate(
        model=model,
        dataset=valid_set,
        batch_size=params["batch_size"],
        num_batches=params["val_batches"],
        max_seq_length=params["max_seq_length"],
        iterate_batches=_cancellable(ctx),
    )


def _summary(
    params: dict, callback: JobCallback, trainable: int, name: str, seconds: float
) -> dict:
    last = callback.last_train
    shown = {k: v for k, v in params.items() if k not in ("model_path", "dataset_path")}
    return {
        "fine_tune_type": params["fine_tune_type"],
        "name": name,
        "iterations": params["iters"],
        "final_train_loss": round(last["train_loss"], 4),
        "final_val_loss": round(callback.last_val_loss, 4),
        "best_val_loss": round(callback.best_val_loss, 4),
        "best_iteration": callback.best_iteration,
        "trained_tokens": int(last["trained_tokens"]),
        "tokens_per_second": round(last["tokens_per_second"], 1),
        "iterations_per_second": round(params["iters"] / callback.train_seconds, 3),
        "peak_memory_gb": round(mx.get_peak_memory() / 1e9, 3),
        "trainable_parameters": trainable,
        "train_seconds": round(callback.train_seconds, 1),
        "seconds": round(seconds, 1),
        "params": {**shown, "adapter_name": params["adapter_name"] or name},
    }


def _save_model(ctx, model, tokenizer, config, params, name: str, summary: dict) -> JobResult:
    ctx.progress(1.0, "saving the fine-tuned model")
    folder = ctx.workdir / MODEL_SUBDIR
    save(folder, params["model_path"], model, tokenizer, dict(config), donate_model=False)
    # The model folder holds the final weights; mlx-lm's full-size checkpoints would
    # only double the artifact (the best one is kept).
    for path in ctx.workdir.iterdir():
        if path.name == ADAPTER_FILE or CHECKPOINT.fullmatch(path.name):
            path.unlink()
    return JobResult(summary=summary, model=params["fused_name"] or name, model_subdir=MODEL_SUBDIR)


def _save_adapter(ctx: JobContext, params: dict, name: str, summary: dict) -> JobResult:
    adapter = {
        "name": name,
        "base_model": params["model"],
        "fine_tune_type": params["fine_tune_type"],
    }
    result = JobResult(summary=summary, adapter=adapter, adapter_subdir="")
    if params["fuse"]:
        ctx.progress(1.0, "fusing the adapter into a new model")
        _fuse(params["model_path"], ctx.workdir, ctx.workdir / FUSED_SUBDIR)
        result.model, result.model_subdir = params["fused_name"], FUSED_SUBDIR
    return result


def _fuse(model_path: str, adapter_path: Path, output: Path) -> None:
    """What `mlx_lm.fuse` does: the stored base with the saved adapter, each LoRA/DoRA
    layer folded into a plain layer (re-quantized on a quantized base), saved."""
    model, tokenizer, config = load(model_path, adapter_path=str(adapter_path), return_config=True)
    fused = [(n, m.fuse(dequantize=False)) for n, m in model.named_modules() if hasattr(m, "fuse")]
    if fused:
        model.update_modules(tree_unflatten(fused))
    save(output, model_path, model, tokenizer, config, donate_model=False)
