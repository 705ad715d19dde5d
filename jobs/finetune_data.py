"""A fine-tune's dataset folder: train.jsonl and valid.jsonl, read as mlx-lm reads them.

Below both sides of the finetune job: validating (finetune) checks every example here
so that a bad folder is a 400, and training (finetune_training) reads the same lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from .context import JobParamsError
from .dataset_examples import check_example

SPLITS = ("train", "valid")
READERS = {"chat": "messages", "tools": "messages", "completions": "prompt", "text": "text"}


def read_jsonl(path: Path) -> list[dict]:
    """Every record of a JSONL file, skipping blank lines (mlx-lm's reader chokes on them)."""
    records = []
    try:
        with open(path, encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError as error:
                    msg = getattr(error, "msg", error)
                    raise JobParamsError(f"{path.name} line {number} is not JSON ({msg})") from None
    except UnicodeDecodeError as error:
        raise JobParamsError(f"{path.name} is not UTF-8 text ({error.reason})") from None
    return records


def example_format(example: dict) -> str:
    """The format mlx-lm's create_dataset reads `example` as, in its own order of tests."""
    if not isinstance(example, dict):
        raise JobParamsError("dataset examples must be JSON objects")
    if "prompt" in example and "completion" in example:
        return "completions"
    if "messages" in example:
        return "tools" if "tools" in example else "chat"
    if "text" in example:
        return "text"
    raise JobParamsError("dataset examples need messages, prompt and completion, or text")


def check_dataset(folder: Path, batch_size: int, mask_prompt: bool) -> dict:
    """Every train/valid example checked in one format; counts and the format."""
    counts, formats = {}, set()
    for split in SPLITS:
        path = folder / f"{split}.jsonl"
        if not path.is_file():
            raise JobParamsError(f"dataset has no {split}.jsonl in {folder}")
        examples = read_jsonl(path)
        if not examples:
            raise JobParamsError(f"dataset {split}.jsonl is empty")
        first = example_format(examples[0])
        for number, example in enumerate(examples, start=1):
            fmt = example_format(example)
            # mlx-lm picks a split's reader from its first example and reads every example
            # with it (chat examples may or may not carry tools): another format would
            # crash it mid-training.
            if READERS[fmt] != READERS[first]:
                raise JobParamsError(
                    f"dataset {split}.jsonl example {number} is {fmt} but the first is {first}:"
                    " a split must be in one format"
                )
            try:
                check_example(example, fmt)
            except ValueError as error:
                raise JobParamsError(f"dataset {split}.jsonl example {number}: {error}") from None
        # mlx-lm's batch iterator refuses a split smaller than one batch.
        if len(examples) < batch_size:
            raise JobParamsError(
                f"dataset {split}.jsonl has {len(examples)} examples, fewer than"
                f" batch_size {batch_size}"
            )
        counts[f"{split}_examples"] = len(examples)
        formats.add(first)
    if mask_prompt and "text" in formats:
        raise JobParamsError("mask_prompt needs chat or completions examples, not text")
    return {"dataset_format": "/".join(sorted(formats)), **counts}
