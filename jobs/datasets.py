"""The dataset job: examples from an upload or the lab's history, split into mlx-lm files.

`validate` reads the whole source at POST time, so a bad line is a 400 then and not
a failed job later; `run` reads it again, shuffles, splits and writes train.jsonl,
valid.jsonl and test.jsonl the way mlx-lm's trainer reads them.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

from inference.model_registry import model_exists, model_named
from labsettings import lab_settings

from . import dataset_sources as sources
from .context import JobContext, JobParamsError, JobResult
from .dataset_examples import FORMATS, read_upload
from .dataset_tokens import TokenCounter
from .uploads import upload_meta, upload_path

SPLITS = ("train", "valid", "test")
DEFAULT_SPLIT = {"train": 0.8, "valid": 0.1, "test": 0.1}
PARAMS = ("name", "format", "source", "split", "seed", "model")
SOURCES = ("upload", "conversations", "responses")
# Keys validate() adds to an upload source; accepted back so validating twice is harmless.
UPLOAD_EXTRAS = ("path", "filename")
CHECK_EVERY = 200
MAX_PAGE_SIZE = 500


def validate(params: dict, owner=None) -> dict:
    """Normalised dataset params; JobParamsError saying what is wrong."""
    if not isinstance(params, dict):
        raise JobParamsError("params must be an object")
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise JobParamsError(f"unknown parameter(s): {', '.join(unknown)}")
    fmt = params.get("format")
    if fmt not in FORMATS:
        raise JobParamsError(f"format must be one of {', '.join(FORMATS)}")
    name = params.get("name") or ""
    if not isinstance(name, str) or len(name) > 200:
        raise JobParamsError("name must be a string of at most 200 characters")
    seed = params.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise JobParamsError("seed must be an integer")
    split = _split(params.get("split", DEFAULT_SPLIT))
    model = _model(params.get("model"))
    source = _source(params.get("source"), fmt, owner)
    _check_split_sizes(len(load_examples(source, fmt)), split)
    return {
        "name": name, "format": fmt, "source": source, "split": split, "seed": seed, "model": model
    }  # fmt: skip


def _split(raw) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw or set(raw) - set(SPLITS):
        raise JobParamsError("split must be an object of train, valid and test ratios")
    split = {}
    for name in SPLITS:
        ratio = raw.get(name, 0)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 0:
            raise JobParamsError(f"split.{name} must be a number >= 0")
        split[name] = float(ratio)
    if abs(sum(split.values()) - 1) > 1e-6:
        raise JobParamsError("split ratios must add up to 1")
    if split["train"] <= 0:
        raise JobParamsError("split.train must be more than 0")
    return split


def _model(name) -> str:
    name = name or lab_settings.default_model
    if not isinstance(name, str) or not model_exists(name):
        raise JobParamsError(f"model '{name}' is not registered")
    return name


def _source(raw, fmt: str, owner) -> dict:
    chosen = [key for key in SOURCES if key in raw] if isinstance(raw, dict) else []
    allowed = set(chosen) | (set(UPLOAD_EXTRAS) if chosen == ["upload"] else set())
    if len(chosen) != 1 or set(raw) - allowed:
        raise JobParamsError(f"source must have exactly one of {', '.join(SOURCES)}")
    kind, selection = chosen[0], raw[chosen[0]]
    if kind == "upload":
        return _upload_source(selection, owner)
    if kind == "conversations":
        if fmt == "tools":
            raise JobParamsError("lab conversations have no tool calls; use the chat format")
        return {"conversations": sources.conversation_ids(selection, owner)}
    ids = sources.response_ids(selection, owner)
    if selection == sources.EVERYONE:  # recorded: the job took other users' text
        return {"responses": ids, "of": sources.EVERYONE}
    return {"responses": ids}


def _upload_source(upload_id, owner) -> dict:
    path = upload_path(upload_id)
    meta = upload_meta(upload_id)
    # Another user's upload is reported as missing, not as forbidden.
    if owner is not None and meta.get("owner_id") not in (None, owner.pk):
        raise JobParamsError(f"upload '{upload_id}' not found")
    return {"upload": upload_id, "path": str(path), "filename": meta.get("filename", path.name)}


def load_examples(source: dict, fmt: str) -> list[dict]:
    """Every example of a validated source, in the source's order."""
    if "upload" in source:
        return read_upload(Path(source["path"]), fmt)
    if "conversations" in source:
        chats, what = sources.conversation_chats(source["conversations"]), "conversations"
    else:
        chats, what = sources.response_chats(source["responses"], fmt == "tools"), "responses"
    examples = [example for chat in chats for example in sources.chat_examples(chat, fmt)]
    if not examples:
        raise JobParamsError(f"the selected {what} have no assistant replies to learn from")
    return examples


def split_counts(total: int, split: dict[str, float]) -> dict[str, int]:
    """Examples per split: floors of the ratios, the rest to the largest remainders."""
    scale = sum(split.values())
    raw = {name: split[name] / scale * total for name in SPLITS}
    counts = {name: math.floor(raw[name]) for name in SPLITS}
    takers = sorted(
        (name for name in SPLITS if split[name] > 0),
        key=lambda name: (counts[name] - raw[name], SPLITS.index(name)),
    )
    for name in itertools.islice(itertools.cycle(takers), total - sum(counts.values())):
        counts[name] += 1
    return counts


def _check_split_sizes(total: int, split: dict[str, float]) -> None:
    def empty_splits(n: int) -> list[str]:
        counts = split_counts(n, split)
        return [name for name in SPLITS if split[name] > 0 and counts[name] == 0]

    empty = empty_splits(total)
    if not empty:
        return
    need = next((n for n in range(total + 1, 100_000) if not empty_splits(n)), None)
    hint = f"; this split needs at least {need}" if need else ""
    raise JobParamsError(
        f"{total} examples are too few: the {' and '.join(empty)} split would get none"
        f"{hint} (or set its ratio to 0)"
    )


def run(ctx: JobContext) -> JobResult:
    """Write the split files into ctx.workdir and count their tokens."""
    params = ctx.params
    fmt, split, source = params["format"], params["split"], params["source"]
    ctx.progress(0.0, "reading examples")
    examples = load_examples(source, fmt)
    random.Random(params["seed"]).shuffle(examples)
    counts = split_counts(len(examples), split)
    ctx.log(f"{len(examples)} examples from {_describe(source)}: {counts}")
    ctx.progress(0.05, "loading the tokenizer")
    counter = TokenCounter(_model_path(params["model"]))
    progress = _Progress(ctx, len(examples))
    tokens, start = {}, 0
    for name in SPLITS:
        part = examples[start : start + counts[name]]
        start += counts[name]
        if split[name] > 0:  # a 0-ratio split gets no file, so mlx-lm sees it as absent
            tokens[name] = _write_split(ctx.workdir / f"{name}.jsonl", part, counter, progress)
        else:
            tokens[name] = 0
    ctx.progress(1.0, "done")
    return JobResult(summary=_summary(fmt, source, counts, tokens, counter, ctx))


def _summary(fmt, source, counts, tokens, counter: TokenCounter, ctx: JobContext) -> dict:
    summary = {
        "format": fmt,
        "source": _describe(source),
        "counts": counts,
        "tokens": tokens,
        "examples": sum(counts.values()),
        "longest_example_tokens": counter.longest,
    }
    if counter.template_failures:
        # mlx-lm renders chats with the same template, so its training would fail too.
        summary["template_failures"] = counter.template_failures
        ctx.log(
            f"{counter.template_failures} examples could not be rendered by the model's chat"
            " template; their tokens were counted on the plain text"
        )
    return summary


class _Progress:
    """Counts written examples; every CHECK_EVERY reports progress and checks for cancel."""

    def __init__(self, ctx: JobContext, total: int):
        self.ctx, self.total, self.done = ctx, max(total, 1), 0

    def step(self) -> None:
        if self.done % CHECK_EVERY == 0:
            self.ctx.check_cancelled()
            fraction = 0.05 + 0.95 * self.done / self.total
            self.ctx.progress(fraction, f"{self.done} of {self.total} examples written")
        self.done += 1


def _write_split(path: Path, examples: list[dict], counter: TokenCounter, progress) -> int:
    tokens = 0
    with open(path, "w", encoding="utf-8") as out:
        for example in examples:
            progress.step()
            # ASCII escapes: mlx-lm opens the files in the locale's encoding.
            out.write(json.dumps(example) + "\n")
            tokens += counter.count(example)
    return tokens


def _model_path(name: str) -> Path:
    record = model_named(name)
    if record is None:
        raise JobParamsError(f"model '{name}' is not registered")
    return Path(record.path)


def _describe(source: dict) -> str:
    if "upload" in source:
        return f"upload {source.get('filename') or source['upload']}"
    if "conversations" in source:
        return f"{len(source['conversations'])} conversations"
    of = " of every user" if source.get("of") == sources.EVERYONE else ""
    return f"{len(source['responses'])} response chains{of}"


def preview(folder: Path, split: str, page: int, page_size: int = 20) -> dict:
    """One page (from 1) of a split's examples, read without loading the whole file."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}")
    for label, value in (("page", page), ("page_size", page_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer")
    if page_size > MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be at most {MAX_PAGE_SIZE}")
    path = Path(folder) / f"{split}.jsonl"
    total = sum(1 for _ in _lines(path))
    pages = math.ceil(total / page_size)
    if page > max(pages, 1):
        raise ValueError(f"page {page} is past the last page ({pages})")
    start = (page - 1) * page_size
    examples = [
        json.loads(line) for line in itertools.islice(_lines(path), start, start + page_size)
    ]
    return {
        "split": split, "page": page, "page_size": page_size, "total": total, "pages": pages,
        "examples": examples,
    }  # fmt: skip


def _lines(path: Path):
    """The file's non-blank lines as bytes; nothing for a split that has no file."""
    if not path.is_file():
        return
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                yield line
