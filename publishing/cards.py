"""README cards for what the lab pushes, made with huggingface_hub's card classes."""

from __future__ import annotations

from huggingface_hub import DatasetCard, DatasetCardData, ModelCard, ModelCardData

from .card_evaluation import eval_results, evaluation_section

# An evaluation of the pushed model and its variant's index in it (see card_evaluation).
Evaluated = tuple[dict, int] | None


def _yaml_card(card_class, data, body: str):
    return card_class(f"---\n{data.to_yaml()}\n---\n\n{body.strip()}\n")


def _base_model_metadata(base: str | None) -> str | None:
    # Only a Hub id ("org/name") belongs in `base_model`; registry names stay in the text.
    return base if base and "/" in base else None


def _usage(repo_id: str, adapter_of: str | None) -> str:
    if adapter_of:
        return f"""```python
from huggingface_hub import snapshot_download
from mlx_lm import generate, load

adapter = snapshot_download("{repo_id}")
model, tokenizer = load("{adapter_of}", adapter_path=adapter)
print(generate(model, tokenizer, prompt="Hello", max_tokens=64))
```"""
    return f"""```python
from mlx_lm import generate, load

model, tokenizer = load("{repo_id}")
print(generate(model, tokenizer, prompt="Hello", max_tokens=64))
```"""


def _facts(rows: dict) -> str:
    return "\n".join(f"- **{name}**: {value}" for name, value in rows.items() if value is not None)


def _model_data(repo_id: str, tags: list[str], base, evaluated: Evaluated) -> ModelCardData:
    # model-index needs the model's name; its results are the pushed variant's figures.
    results = eval_results(*evaluated) if evaluated else None
    return ModelCardData(
        library_name="mlx", tags=tags, pipeline_tag="text-generation",
        base_model=_base_model_metadata(base), eval_results=results or None,
        model_name=repo_id.split("/")[-1] if results else None,
    )  # fmt: skip


def _evaluation(evaluated: Evaluated) -> str:
    return evaluation_section(*evaluated) + "\n" if evaluated else ""


def quantized_model_card(
    repo_id: str, job_params: dict, result: dict, evaluated: Evaluated = None
) -> ModelCard:
    base = job_params.get("model")
    data = _model_data(repo_id, ["mlx"], base, evaluated)
    facts = {
        "Base model": base,
        "Bits": result.get("bits") if not result.get("recipe") else None,
        "Recipe": result.get("recipe"),
        "Group size": result.get("group_size"),
        "Mode": result.get("mode"),
        "Bits per weight": _rounded(result.get("bits_per_weight")),
        "Dequantized to float": result.get("dequantized") or None,
        "Perplexity, base → this model": _perplexity_change(result.get("perplexity")),
    }
    body = f"""# {repo_id}

Quantized with MLX Lab (mlx-lm's converter) from `{base}`.

{_facts(facts)}

{_evaluation(evaluated)}## Use with mlx-lm

{_usage(repo_id, None)}
"""
    return _yaml_card(ModelCard, data, body)


def finetuned_model_card(
    repo_id: str, job_params: dict, result: dict, adapter: bool, evaluated: Evaluated = None
) -> ModelCard:
    base = job_params.get("model")
    tags = ["mlx", "lora" if job_params.get("fine_tune_type") != "full" else "finetuned"]
    data = _model_data(repo_id, tags, base, evaluated)
    lora = job_params.get("lora") or {}
    facts = {
        "Base model": base,
        "Fine-tune type": job_params.get("fine_tune_type"),
        "Iterations": job_params.get("iters"),
        "Batch size": job_params.get("batch_size"),
        "Learning rate": job_params.get("learning_rate"),
        "LoRA rank / scale / dropout": (
            f"{lora.get('rank')} / {lora.get('scale')} / {lora.get('dropout')}" if lora else None
        ),
        "Layers": job_params.get("num_layers"),
        "Max sequence length": job_params.get("max_seq_length"),
        "Final train loss": _rounded(result.get("final_train_loss")),
        "Final validation loss": _rounded(result.get("final_val_loss")),
        "Best validation loss": _rounded(result.get("best_val_loss")),
    }
    what = "a LoRA adapter" if adapter else "a finetuned model"
    body = f"""# {repo_id}

{what.capitalize()} trained with MLX Lab (`mlx_lm.tuner`) on `{base}`.

{_facts(facts)}

{_evaluation(evaluated)}## Use with mlx-lm

{_usage(repo_id, base if adapter else None)}
"""
    return _yaml_card(ModelCard, data, body)


def dataset_card(repo_id: str, job_params: dict, result: dict) -> DatasetCard:
    counts = {split: n for split, n in (result.get("counts") or {}).items() if n}
    total = sum(counts.values())
    data = DatasetCardData(
        tags=["mlx"],
        size_categories=_size_category(total),
        configs=[{
            "config_name": "default",
            "data_files": [{"split": split, "path": f"{split}.jsonl"} for split in counts],
        }],
    )  # fmt: skip
    rows = {f"{split} examples": n for split, n in counts.items()}
    tokens = result.get("tokens") or {}
    rows.update({f"{split} tokens": n for split, n in tokens.items() if counts.get(split)})
    body = f"""# {repo_id}

A training set built with MLX Lab, in mlx-lm's `{result.get("format")}` format
(`train.jsonl`, `valid.jsonl`, `test.jsonl`: one JSON object per line).

{_facts({"Format": result.get("format"), "Source": result.get("source"), **rows})}

## Use with mlx-lm

```sh
mlx_lm.lora --model <model> --train --data <this dataset's folder>
```
"""
    return _yaml_card(DatasetCard, data, body)


def _perplexity_change(change) -> str | None:
    if not isinstance(change, dict) or not isinstance(change.get("change_percent"), float):
        return None
    return f"{change['source']} → {change['result']} ({change['change_percent']:+.1f}%)"


def _rounded(value):
    return round(value, 4) if isinstance(value, float) else value


def _size_category(total: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if total < limit:
            return name
    return "100K<n<1M"
