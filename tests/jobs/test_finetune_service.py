"""The finetune service on a tiny random llama: validation, LoRA/DoRA/full runs, fusing, cancel."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from inference.model_registry import model_register
from jobs.context import JobCancelled, JobParamsError
from jobs.finetune import DATASET_PATH_REFUSED, run, validate
from jobs.models import Job
from tests.jobs.conftest import TRAIN_QUESTIONS, TRAINED_ANSWER
from tests.jobs.recording_context import RecordingContext

TINY = "tiny-llama"


def lines(count: int) -> str:
    example = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    }
    return "\n".join(json.dumps(example) for _ in range(count)) + "\n"


def dataset_folder(root: Path, train: int = 8, valid: int = 4) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.jsonl").write_text(lines(train))
    (root / "valid.jsonl").write_text(lines(valid))
    return root


@pytest.fixture
def tiny(db, tiny_model_folder):
    return model_register(name=TINY, path=tiny_model_folder)


@pytest.fixture
def base(tiny, tiny_dataset_folder) -> dict:
    return {"model": TINY, "dataset": {"path": str(tiny_dataset_folder)}}


# --- validate -------------------------------------------------------------------------


def test_validate_fills_defaults_and_paths(base, tiny_model_folder, tiny_dataset_folder):
    params = validate(base)
    assert params["model_path"] == str(tiny_model_folder.resolve())
    assert params["dataset_path"] == str(tiny_dataset_folder)
    assert params["fine_tune_type"] == "lora"
    assert (params["iters"], params["batch_size"], params["learning_rate"]) == (100, 4, 1e-5)
    assert params["lora"] == {"rank": 8, "scale": 20.0, "dropout": 0.0}
    # 16 layers by default, as mlx-lm, but no more than the model has.
    assert (params["num_layers"], params["val_batches"], params["seed"]) == (2, 25, 0)
    assert params["fuse"] is False and params["adapter_name"] is None
    assert (params["train_examples"], params["valid_examples"]) == (32, 8)
    assert params["dataset_format"] == "chat"
    assert validate(params) == params  # validating twice changes nothing
    json.dumps(params)  # stored in Job.params


def test_validate_reads_a_succeeded_dataset_job(base, tiny_dataset_folder):
    job = Job.objects.create(
        kind="dataset", status="succeeded", artifact_path=str(tiny_dataset_folder)
    )
    params = validate({**base, "dataset": {"job": str(job.id)}})
    assert params["dataset_path"] == str(tiny_dataset_folder)
    assert params["dataset"] == {"job": str(job.id)}


def bad_dataset_job(kind: str, status: str, folder: Path) -> dict:
    job = Job.objects.create(kind=kind, status=status, artifact_path=str(folder))
    return {"job": str(job.id)}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model": "nope"}, "model 'nope' is not in the registry"),
        ({"model": None}, "model is required"),
        ({"dataset": None}, "dataset is required"),
        ({"dataset": "/tmp"}, "dataset must be"),
        ({"dataset": {"path": "relative/folder"}}, DATASET_PATH_REFUSED),
        ({"dataset": {"path": "/no/such/folder"}}, DATASET_PATH_REFUSED),
        ({"dataset": {"job": "not-a-uuid"}}, "dataset.job must be a job id"),
        ({"dataset": {"job": "6f1c3f53-0000-4000-8000-000000000000"}}, "does not exist"),
        ({"fine_tune_type": "qlora"}, "fine_tune_type must be one of lora, dora, full"),
        ({"iters": True}, "iters must be an integer"),
        ({"iters": "10"}, "iters must be an integer"),
        ({"iters": 0}, "iters must be between 1 and 100000"),
        ({"batch_size": 2.0}, "batch_size must be an integer"),
        ({"learning_rate": "1e-4"}, "learning_rate must be a number"),
        ({"learning_rate": 0}, "learning_rate must be above 0"),
        ({"mask_prompt": 1}, "mask_prompt must be true or false"),
        ({"grad_checkpoint": "yes"}, "grad_checkpoint must be true or false"),
        ({"num_layers": 0}, "num_layers must be -1 (all) or at least 1"),
        ({"num_layers": 3}, "the model has only 2 layers"),
        ({"val_batches": 0}, "val_batches must be -1"),
        ({"seed": -1}, "seed must be between"),
        ({"lora": {"rank": 8, "alpha": 16}}, "unknown lora key 'alpha'"),
        ({"lora": {"rank": 2.5}}, "lora.rank must be an integer"),
        ({"lora": {"dropout": 1.0}}, "lora.dropout must be at least 0 and below 1"),
        ({"lr_schedule": {"name": "warp", "arguments": [1e-3]}}, "lr_schedule.name must be"),
        (
            {"lr_schedule": {"name": "cosine_decay", "arguments": [1e-3]}},
            "does not fit cosine_decay",
        ),
        ({"lr_schedule": {"name": "cosine_decay", "arguments": ["x", 10]}}, "must be a number"),
        ({"fuse": True}, "fused_name is required when fuse is true"),
        ({"fused_name": "x"}, "fused_name is set but fuse is false"),
        ({"fuse": True, "fused_name": TINY}, f"fused_name '{TINY}' is taken"),
        ({"fuse": True, "fused_name": "Bad Name"}, "fused_name must be 1-200 of"),
        ({"fine_tune_type": "full", "fuse": True, "fused_name": "x"}, "fuse applies to lora"),
        ({"epochs": 3}, "unknown param 'epochs'"),
    ],
)
def test_validate_rejects(base, change, reason):
    with pytest.raises(JobParamsError) as raised:
        validate({**base, **change})
    assert reason in str(raised.value)


@pytest.mark.parametrize(
    ("kind", "status", "reason"),
    [
        ("dataset", "running", "has not succeeded (it is running)"),
        ("dataset", "failed", "has not succeeded (it is failed)"),
        ("quantize", "succeeded", "is a quantize job, not a dataset job"),
    ],
)
def test_validate_rejects_dataset_jobs(base, tiny_dataset_folder, kind, status, reason):
    dataset = bad_dataset_job(kind, status, tiny_dataset_folder)
    with pytest.raises(JobParamsError, match=re.escape(reason)):
        validate({**base, "dataset": dataset})


def test_a_dataset_path_outside_the_import_roots_is_refused_alike(tiny, tmp_path, settings):
    """Issue 56: dataset.path could be any folder on the server. Now it must lie in
    MLXLAB_IMPORT_ROOTS once links are resolved, and every refusal reads the same."""
    root, outside = tmp_path / "root", dataset_folder(tmp_path / "outside")
    inside = dataset_folder(root / "data")
    (root / "link").symlink_to(outside)
    settings.MLXLAB = settings.MLXLAB.replace(import_roots=(root,))
    refused = [outside, tmp_path / "missing", root / "link", root / ".." / "outside"]
    for folder in refused:
        with pytest.raises(JobParamsError) as raised:
            validate({"model": TINY, "dataset": {"path": str(folder)}})
        assert str(raised.value) == DATASET_PATH_REFUSED, folder
    assert validate({"model": TINY, "dataset": {"path": str(inside)}})["dataset_path"] == str(
        inside
    )


def test_validate_rejects_a_valid_set_smaller_than_a_batch(tiny, tmp_path):
    folder = dataset_folder(tmp_path / "small", train=8, valid=3)
    params = {"model": TINY, "dataset": {"path": str(folder)}}
    with pytest.raises(JobParamsError, match="valid.jsonl has 3 examples, fewer than batch_size 4"):
        validate(params)
    assert validate({**params, "batch_size": 3})["valid_examples"] == 3


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"valid.jsonl": None}, "dataset has no valid.jsonl"),
        ({"train.jsonl": "\n\n"}, "train.jsonl is empty"),
        ({"train.jsonl": lines(4) + "{oops\n"}, "train.jsonl line 5 is not JSON"),
        (
            {"train.jsonl": lines(4) + '{"text": "t"}\n'},
            "train.jsonl example 5 is text but the first is chat",
        ),
        ({"valid.jsonl": '{"x": 1}\n' * 4}, "need messages, prompt and completion, or text"),
        ({"valid.jsonl": '{"messages": [{"role": "user", "content": "q"}]}\n' * 4}, "assistant"),
    ],
)
def test_validate_reads_every_line(tiny, tmp_path, files, reason):
    folder = dataset_folder(tmp_path / "data")
    for name, text in files.items():
        if text is None:
            (folder / name).unlink()
        else:
            (folder / name).write_text(text)
    with pytest.raises(JobParamsError, match=reason):
        validate({"model": TINY, "dataset": {"path": str(folder)}})


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
CHAT = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


@pytest.mark.parametrize(
    ("examples", "fmt"),
    [
        ([{"prompt": "p", "completion": "c"}], "completions"),
        ([CHAT, {**CHAT, "tools": [TOOL]}], "chat"),  # mlx-lm reads both as chat
        ([{**CHAT, "tools": [TOOL]}, CHAT], "tools"),
    ],
)
def test_validate_accepts_mlx_lm_formats(tiny, tmp_path, examples, fmt):
    for name in ("train.jsonl", "valid.jsonl"):
        (tmp_path / name).write_text("\n".join(json.dumps(e) for e in examples * 2) + "\n")
    params = validate({"model": TINY, "dataset": {"path": str(tmp_path)}, "batch_size": 2})
    assert params["dataset_format"] == fmt


def test_validate_rejects_mask_prompt_on_text(tiny, tmp_path):
    folder = tmp_path / "text"
    folder.mkdir()
    for name in ("train.jsonl", "valid.jsonl"):
        (folder / name).write_text('{"text": "some words"}\n' * 4)
    params = {"model": TINY, "dataset": {"path": str(folder)}}
    assert validate(params)["dataset_format"] == "text"
    with pytest.raises(JobParamsError, match="mask_prompt needs chat or completions"):
        validate({**params, "mask_prompt": True})


def test_validate_rejects_full_fine_tuning_of_a_quantized_model(
    db, model_folder, tiny_dataset_folder
):
    model_register(name="quantized", path=model_folder)
    params = {"model": "quantized", "dataset": {"path": str(tiny_dataset_folder)}}
    assert validate({**params, "fine_tune_type": "lora"})["fine_tune_type"] == "lora"
    with pytest.raises(JobParamsError, match="full needs an unquantized model"):
        validate({**params, "fine_tune_type": "full"})


def test_validate_builds_the_schedule(base):
    schedule = {"name": "cosine_decay", "arguments": [1e-3, 100, 1e-5], "warmup": 10}
    params = validate({**base, "lr_schedule": schedule})
    assert params["lr_schedule"] == {**schedule, "warmup_init": 0.0}


# --- runs -----------------------------------------------------------------------------


def validated(django_db_blocker, tiny_model_folder, raw: dict) -> dict:
    """validate() for a module-scoped run: the model is registered only while validating."""
    with django_db_blocker.unblock():
        record = model_register(name=TINY, path=tiny_model_folder)
        try:
            return validate({"model": TINY, **raw})
        finally:
            record.delete()


def answer_logprob(model, tokenizer) -> float:
    """Mean log-probability per token of TRAINED_ANSWER after an unseen question."""
    import mlx.core as mx

    messages = [{"role": "user", "content": "Tell me now."}]  # in neither split
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": TRAINED_ANSWER}], return_dict=False
    )
    logits = model(mx.array(full)[None])[0, :-1].astype(mx.float32)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    targets = mx.array(full[1:])
    picked = mx.take_along_axis(logprobs, targets[:, None], axis=-1)[len(prompt) - 1 :]
    return picked.mean().item()


def logits_of(model, tokenizer):
    import mlx.core as mx

    tokens = tokenizer.apply_chat_template(
        [{"role": "user", "content": TRAIN_QUESTIONS[0]}],
        add_generation_prompt=True,
        return_dict=False,
    )
    return model(mx.array(tokens)[None]).astype(mx.float32)


@pytest.fixture(scope="module")
def tiny_base(tiny_model_folder):
    """The untrained tiny model, its tokenizer and its log-probability of the answer."""
    from mlx_lm import load

    model, tokenizer = load(str(tiny_model_folder))
    return model, tokenizer, answer_logprob(model, tokenizer)


LORA_RUN = {
    "iters": 24,
    "learning_rate": 1e-3,
    "steps_per_eval": 5,
    "steps_per_report": 4,
    "steps_per_save": 10,
    "val_batches": -1,
    "fuse": True,
    "fused_name": "tiny-fused",
    "adapter_name": "tiny-lora",
}


@pytest.fixture(scope="module")
def lora_run(
    django_db_setup, django_db_blocker, tiny_model_folder, tiny_dataset_folder, tmp_path_factory
):
    params = validated(
        django_db_blocker,
        tiny_model_folder,
        {"dataset": {"path": str(tiny_dataset_folder)}, **LORA_RUN},
    )
    ctx = RecordingContext(params=params, workdir=tmp_path_factory.mktemp("lora-run"))
    return ctx, run(ctx)


def test_lora_training_lowers_the_loss(lora_run):
    ctx, result = lora_run
    train_loss = ctx.series["train_loss"]
    assert [x for x, _ in train_loss] == [4, 8, 12, 16, 20, 24]
    assert train_loss[-1][1] < train_loss[0][1] - 1.0
    # Before the 1st step, before every 5th and the last, then the saved weights.
    val_loss = ctx.series["val_loss"]
    assert [x for x, _ in val_loss] == [0, 4, 9, 14, 19, 23, 24]
    assert val_loss[-1][1] < val_loss[0][1]
    assert ctx.values["iteration"] == 24
    assert {"learning_rate", "tokens_per_second", "peak_memory_gb"} <= set(ctx.values)


def test_lora_progress_rises_to_one(lora_run):
    ctx, _ = lora_run
    fractions = [fraction for fraction, _ in ctx.progress_reports]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    assert "iteration 12/24" in [message for _, message in ctx.progress_reports]


def test_lora_result_and_files(lora_run):
    ctx, result = lora_run
    assert result.adapter == {"name": "tiny-lora", "base_model": TINY, "fine_tune_type": "lora"}
    assert result.adapter_subdir == ""
    for name in ("adapters.safetensors", "best_adapters.safetensors", "adapter_config.json"):
        assert (ctx.workdir / name).is_file(), name
    config = json.loads((ctx.workdir / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora"
    assert config["lora_parameters"] == {"rank": 8, "scale": 20.0, "dropout": 0.0}
    summary = result.summary
    assert summary["iterations"] == 24
    assert summary["final_val_loss"] == pytest.approx(ctx.series["val_loss"][-1][1], abs=1e-4)
    assert summary["best_val_loss"] == min(round(y, 4) for _, y in ctx.series["val_loss"])
    assert summary["best_iteration"] in [x for x, _ in ctx.series["val_loss"]]
    assert summary["trained_tokens"] > 0 and summary["tokens_per_second"] > 0
    assert summary["params"]["learning_rate"] == 1e-3
    json.dumps(summary)


def test_lora_adapter_loads_and_teaches_the_answer(lora_run, tiny_model_folder, tiny_base):
    from mlx_lm import load

    ctx, _ = lora_run
    _, tokenizer, before = tiny_base
    adapted, _ = load(str(tiny_model_folder), adapter_path=str(ctx.workdir))
    after = answer_logprob(adapted, tokenizer)
    assert after > before + 2.0, (before, after)  # log-probability per token, in nats


def test_best_adapter_loads_in_place_of_the_last(lora_run, tiny_model_folder, tiny_base, tmp_path):
    from mlx_lm import load

    ctx, _ = lora_run
    shutil.copy(ctx.workdir / "adapter_config.json", tmp_path / "adapter_config.json")
    shutil.copy(ctx.workdir / "best_adapters.safetensors", tmp_path / "adapters.safetensors")
    best, tokenizer = load(str(tiny_model_folder), adapter_path=str(tmp_path))
    assert answer_logprob(best, tokenizer) > tiny_base[2] + 2.0


def test_fused_model_matches_base_plus_adapter(lora_run, tiny_model_folder, tiny_base):
    import mlx.core as mx
    from mlx_lm import load

    ctx, result = lora_run
    assert (result.model, result.model_subdir) == ("tiny-fused", "fused")
    fused, tokenizer = load(str(ctx.workdir / "fused"))
    adapted, _ = load(str(tiny_model_folder), adapter_path=str(ctx.workdir))
    fused_logits = logits_of(fused, tokenizer)
    assert mx.abs(fused_logits - logits_of(adapted, tokenizer)).max().item() < 1e-3
    assert mx.abs(fused_logits - logits_of(tiny_base[0], tokenizer)).max().item() > 0.1


def test_dora_run_from_a_dataset_job(
    db, tiny, tiny_model_folder, tiny_dataset_folder, tiny_base, tmp_path
):
    from mlx_lm import load
    from mlx_lm.models.llama import TransformerBlock

    job = Job.objects.create(
        kind="dataset", status="succeeded", artifact_path=str(tiny_dataset_folder)
    )
    params = validate(
        {
            "model": TINY,
            "dataset": {"job": str(job.id)},
            "fine_tune_type": "dora",
            "grad_checkpoint": True,
            "iters": 6,
            "learning_rate": 2e-3,
            "steps_per_report": 3,
            "val_batches": 1,
        }
    )
    ctx = RecordingContext(params=params, workdir=tmp_path / "work", job_id="0123abcd-ffff")
    ctx.workdir.mkdir()
    block_call = TransformerBlock.__call__
    result = run(ctx)
    assert TransformerBlock.__call__ is block_call  # mlx-lm's checkpointing patch is undone
    assert result.adapter == {
        "name": f"{TINY}-0123abcd",
        "base_model": TINY,
        "fine_tune_type": "dora",
    }
    assert result.model is None
    assert json.loads((ctx.workdir / "adapter_config.json").read_text())["fine_tune_type"] == "dora"
    _, tokenizer, before = tiny_base
    adapted, _ = load(str(tiny_model_folder), adapter_path=str(ctx.workdir))
    assert answer_logprob(adapted, tokenizer) > before + 1.0


def test_full_run_saves_a_loadable_model(db, tiny, tiny_dataset_folder, tiny_base, tmp_path):
    from mlx_lm import load

    params = validate(
        {
            "model": TINY,
            "dataset": {"path": str(tiny_dataset_folder)},
            "fine_tune_type": "full",
            "iters": 6,
            "learning_rate": 1e-3,
            "steps_per_report": 3,
            "steps_per_save": 3,
            "val_batches": 1,
            "fused_name": "tiny-full",
        }
    )
    ctx = RecordingContext(params=params, workdir=tmp_path)
    result = run(ctx)
    assert (result.model, result.model_subdir, result.adapter) == ("tiny-full", "model", None)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "adapter_config.json",
        "best_adapters.safetensors",
        "model",
    ]
    trained, tokenizer = load(str(tmp_path / "model"))
    assert answer_logprob(trained, tokenizer) > tiny_base[2] + 1.0
    assert result.summary["final_train_loss"] < ctx.series["train_loss"][0][1]


def test_cancel_stops_training(db, tiny, tiny_dataset_folder, tmp_path):
    params = validate({"model": TINY, "dataset": {"path": str(tiny_dataset_folder)}, "iters": 50})
    ctx = RecordingContext(params=params, workdir=tmp_path, cancel_after_checks=3)
    with pytest.raises(JobCancelled):
        run(ctx)
    assert ctx.checks == 4
    assert "train_loss" not in ctx.series


@pytest.fixture(scope="module")
def tiny_quantized_folder(tiny_model_folder, tmp_path_factory) -> Path:
    """The tiny model quantized to 4 bits, group 32, as mlx-lm would save it."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm import load

    model, _ = load(str(tiny_model_folder))
    nn.quantize(model, group_size=32, bits=4)
    folder = tmp_path_factory.mktemp("tiny-q4")
    for item in tiny_model_folder.iterdir():
        if item.name not in ("config.json", "model.safetensors"):
            shutil.copy(item, folder / item.name)
    config = json.loads((tiny_model_folder / "config.json").read_text())
    config["quantization"] = {"group_size": 32, "bits": 4}
    (folder / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return folder


def test_lora_on_a_quantized_base(db, tiny_quantized_folder, tiny_dataset_folder, tmp_path):
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import load

    from inference.engine.acceleration.cpu_fast_path import blas_state

    model_register(name="tiny-q4", path=tiny_quantized_folder)
    params = validate(
        {
            "model": "tiny-q4",
            "dataset": {"path": str(tiny_dataset_folder)},
            "iters": 6,
            "learning_rate": 1e-3,
            "steps_per_report": 3,
            "val_batches": 1,
            "fuse": True,
            "fused_name": "tiny-q4-fused",
        }
    )
    ctx = RecordingContext(params=params, workdir=tmp_path)
    result = run(ctx)
    # On the CPU with OpenBLAS it trains on dense twins; the adapter is for the quantized base.
    fast = blas_state().loaded and mx.default_device() == mx.cpu
    assert result.summary["training_weights"] == ("dense float32" if fast else "quantized")
    base_model, tokenizer = load(str(tiny_quantized_folder))
    adapted, _ = load(str(tiny_quantized_folder), adapter_path=str(tmp_path))
    assert isinstance(adapted.model.layers[0].self_attn.q_proj.linear, nn.QuantizedLinear)
    assert answer_logprob(adapted, tokenizer) > answer_logprob(base_model, tokenizer) + 1.0
    # The fused model is re-quantized like its base, and close to base + adapter.
    fused, _ = load(str(tmp_path / "fused"))
    assert json.loads((tmp_path / "fused" / "config.json").read_text())["quantization"]["bits"] == 4
    assert isinstance(fused.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    adapted_logits = logits_of(adapted, tokenizer)
    fused_error = mx.abs(logits_of(fused, tokenizer) - adapted_logits).max().item()
    trained_change = mx.abs(logits_of(base_model, tokenizer) - adapted_logits).max().item()
    assert fused_error < trained_change / 4
