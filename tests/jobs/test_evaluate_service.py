"""The evaluate service: line shapes, scoring against mlx-lm's loss, validation, runs on a
tiny random llama (with a made-up adapter), cancel."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inference.model_registry import model_register
from inference.models import Adapter
from jobs.context import JobCancelled, JobParamsError
from jobs.eval_examples import check_eval_example, example_kind, is_exact_match, read_eval_file
from jobs.evaluate import BUILTIN_PATH, run, validate, variant_figures
from jobs.models import Job
from tests.jobs.recording_context import RecordingContext

TINY = "tiny-eval"
ADAPTER = "tiny-eval-lora"
SHOTS = [{"role": "system", "content": "Answer in one word."},
         {"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "2"}]  # fmt: skip
MC = {"prompt": "What colour is grass?", "choices": ["Green", "Red"], "answer": 0}
EXACT = {"prompt": [*SHOTS, {"role": "user", "content": "What is 2 + 2?"}], "answer": "4"}
COMPLETION = {"prompt": "Say hi.", "completion": "Hi!"}


def jsonl(rows) -> str:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)


# --- line shapes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ([1], "must be a JSON object"),
        ({"prompt": "q", "choices": ["a"], "answer": 0}, "choices must be a list of 2 to 10"),
        ({"prompt": "q", "choices": ["a", ""], "answer": 0}, "choices must be non-empty"),
        ({"prompt": "q", "choices": ["a", "a"], "answer": 0}, "choices must all differ"),
        ({"prompt": "q", "choices": ["a", "b"], "answer": 2}, "between 0 and 1 (got 2)"),
        ({"prompt": "q", "choices": ["a", "b"], "answer": True}, "index (from 0)"),
        ({"prompt": "q", "choices": ["a", "b"], "answer": "a"}, "index (from 0)"),
        ({"prompt": "", "answer": "a"}, "prompt must not be empty"),
        ({"prompt": "q", "answer": 1}, "an index answer needs choices"),
        ({"prompt": "q", "answer": " . "}, "answer must have a letter or digit"),
        ({"prompt": [], "answer": "a"}, "non-empty list of messages"),
        ({"prompt": [{"role": "bot", "content": "x"}], "answer": "a"}, "prompt[0].role"),
        ({"prompt": [{"role": "user", "content": 3}], "answer": "a"}, "prompt[0].content"),
        ({"prompt": SHOTS, "answer": "a"}, "last message must be the user's"),
        ({"prompt": "q"}, "an example needs prompt and choices and answer"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "include an assistant message"),
    ],
)
def test_bad_lines_say_why(raw, reason):
    with pytest.raises(ValueError) as caught:
        check_eval_example(raw)
    assert reason in str(caught.value)


def test_lines_keep_only_their_shapes_keys():
    assert check_eval_example({**MC, "id": 7}) == MC
    assert check_eval_example({**EXACT, "note": "x"}) == EXACT
    assert check_eval_example({**COMPLETION, "extra": 1}) == COMPLETION
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                         {"role": "user", "content": "bye"}]}  # fmt: skip
    # Scored on its last reply: a chat ending on the user's turn ends at the reply before.
    assert check_eval_example(chat)["messages"] == chat["messages"][:2]


@pytest.mark.parametrize(
    ("output", "answer", "same"),
    [
        ("Paris", "Paris", True),
        ("  paris.\n", "Paris", True),
        ('"Green!"', "green", True),
        ("New  York", "new york", True),
        ("The capital is Paris.", "Paris", False),
        ("4", "four", False),
        ("", "a", False),
    ],
)
def test_exact_match_strips_and_casefolds(output, answer, same):
    assert is_exact_match(output, answer) is same


def test_a_file_names_its_bad_lines(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(jsonl([MC, "", EXACT, "not json", {**MC, "answer": 5}]))
    with pytest.raises(JobParamsError) as caught:
        read_eval_file(path)
    assert str(caught.value) == (
        "line 4: not valid JSON (Expecting value); line 5: answer must be between 0 and 1 (got 5)"
    )
    csv = tmp_path / "set.csv"
    csv.write_text("prompt,answer\nq,a\n")
    with pytest.raises(JobParamsError, match="cannot be read from CSV; upload JSONL"):
        read_eval_file(csv)


def test_the_builtin_set_is_valid_and_mixed():
    examples = read_eval_file(BUILTIN_PATH)
    kinds = [example_kind(example) for example in examples]
    assert len(examples) >= 36 and kinds.count("perplexity") >= 8
    assert kinds.count("multiple_choice") >= 16 and kinds.count("exact_answer") >= 16
    # A short run (max_examples) gets both kinds.
    assert {"choices" in e for e in examples[:2]} == {True, False}


# --- scoring ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_loaded(tiny_model_folder):
    from mlx_lm import load

    return load(str(tiny_model_folder))


def test_sequence_nll_is_mlx_lm_default_loss(tiny_loaded):
    import mlx.core as mx
    from mlx_lm.tuner.trainer import default_loss

    from jobs.evaluate_scoring import sequence_nll

    model, _ = tiny_loaded
    tokens = list(range(100, 130))
    [(nll, count)] = sequence_nll(model, [tokens], [12])
    loss, ntoks = default_loss(model, mx.array([tokens]), mx.array([[12, len(tokens)]]))
    assert count == ntoks.item() == len(tokens) - 12
    assert nll == pytest.approx(loss.item() * ntoks.item(), rel=1e-5)


def test_a_row_scores_the_same_alone_or_padded(tiny_loaded):
    from jobs.evaluate_scoring import sequence_nll

    model, _ = tiny_loaded
    short, long = list(range(200, 210)), list(range(300, 340))
    alone = sequence_nll(model, [short], [4])[0]
    together = sequence_nll(model, [short, long], [4, 4])
    # Only the row's own 6 tokens: no padding position is scored.
    assert together[0][1] == alone[1] == 6 and together[1][1] == 36
    assert together[0][0] == pytest.approx(alone[0], rel=1e-5)


def test_examples_scored_together_score_as_alone(tiny_loaded):
    from jobs.evaluate_scoring import Item, batches, score_batch

    model, _ = tiny_loaded
    items = [
        Item("multiple_choice", (tuple(range(100, 112)), tuple(range(100, 118))), (6, 6)),
        Item("perplexity", (tuple(range(200, 240)),), (3,)),
        Item("exact_answer", (tuple(range(300, 309)),), (5,)),
    ]
    together = score_batch(model, items)
    for item, scored in zip(items, together, strict=True):
        [alone] = score_batch(model, [item])
        assert [count for _, count in scored] == [count for _, count in alone]
        assert [nll for nll, _ in scored] == pytest.approx([nll for nll, _ in alone], rel=1e-5)
    # Shortest first; a pass holds up to 512 padded tokens, an example's choices together.
    assert batches(items) == [[2, 0, 1]]
    assert batches(items, tokens=54) == [[2, 0], [1]]
    assert batches([items[0]] * 30) == [list(range(14)), list(range(14, 28)), [28, 29]]


def test_tokens_of_each_shape(tiny_loaded):
    from jobs.evaluate_scoring import best_choice, tokenize

    _, tokenizer = tiny_loaded
    mc = tokenize(MC, tokenizer)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": MC["prompt"]}], add_generation_prompt=True, return_dict=False
    )
    assert mc.offsets == (len(prompt), len(prompt)) and mc.reference == 0
    for sequence, choice in zip(mc.sequences, MC["choices"], strict=True):
        assert list(sequence) == prompt + tokenizer.encode(choice, add_special_tokens=False)
    exact = tokenize(EXACT, tokenizer)
    assert exact.prompt == exact.sequences[0][: exact.offsets[0]] and exact.max_tokens >= 2
    # mlx-lm's own reading of a completion, prompt masked.
    completion = tokenize(COMPLETION, tokenizer)
    messages = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]
    assert list(completion.sequences[0]) == tokenizer.apply_chat_template(
        messages, return_dict=False
    )
    assert best_choice([(3.0, 1), (1.0, 1), (1.0, 2)]) == 1  # the first of a tie


def test_variant_figures_from_scores():
    from jobs.evaluate_scoring import Score

    scores = [
        Score("multiple_choice", 2.0, 2, 20, 0.5, correct=True),
        Score("multiple_choice", 4.0, 2, 20, 0.5, correct=False),
        Score("exact_answer", 1.0, 1, 10, 0.25, correct=True, output="4"),
        Score("perplexity", 3.0, 5, 30, 0.25),
    ]
    variant = {"model": "m", "adapter": "a+b"}
    figures = variant_figures(variant, scores, 1234)
    assert figures == {
        "name": "m", "adapter": "a+b", "perplexity": math.exp(1.0), "loss": 1.0,
        "accuracy": 0.5, "exact_match": 1.0, "examples": 4, "tokens": 10,
        "tokens_per_second": 80 / 1.5, "peak_memory_bytes": 1234,
    }  # fmt: skip
    only_text = variant_figures(variant, scores[3:], 0)
    assert only_text["accuracy"] is None and only_text["exact_match"] is None


# --- validate ---------------------------------------------------------------------------


@pytest.fixture
def tiny(db, tiny_model_folder):
    return model_register(name=TINY, path=tiny_model_folder)


@pytest.fixture
def adapter(tiny, tmp_path_factory) -> Adapter:
    """A LoRA adapter for the tiny llama, made up (no training): random B, so it changes
    the outputs."""
    import mlx.core as mx

    folder = tmp_path_factory.mktemp("tiny-adapter")
    mx.random.seed(7)
    weights = {}
    for layer in range(2):
        for name in ("q_proj", "v_proj"):
            path = f"model.layers.{layer}.self_attn.{name}"
            out = 64 if name == "q_proj" else 32
            weights[f"{path}.lora_a"] = mx.random.normal((64, 4)) * 0.1
            weights[f"{path}.lora_b"] = mx.random.normal((4, out)) * 0.1
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "lora_parameters": {"rank": 4, "scale": 20.0}}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return Adapter.objects.create(name=ADAPTER, base_model=TINY, path=str(folder))


def test_validate_normalises_and_is_idempotent(adapter, tiny_model_folder):
    params = validate(
        {"variants": [TINY, {"model": TINY, "adapter": ADAPTER}], "dataset": "builtin"}
    )
    assert params["variants"] == [
        {"model": TINY, "adapter": None, "model_path": str(tiny_model_folder.resolve()),
         "adapters": []},
        {"model": TINY, "adapter": ADAPTER, "model_path": str(tiny_model_folder.resolve()),
         "adapters": [{"name": ADAPTER, "path": adapter.path}]},
    ]  # fmt: skip
    assert params["dataset"] == "builtin" and params["dataset_path"] == str(BUILTIN_PATH)
    assert params["max_examples"] is None
    assert validate(params) == params
    json.dumps(params)


def dataset_job(folder: Path, status: str = "succeeded", kind: str = "dataset") -> str:
    return str(Job.objects.create(kind=kind, status=status, artifact_path=str(folder)).id)


def test_validate_reads_a_dataset_jobs_split(tiny, tmp_path):
    (tmp_path / "test.jsonl").write_text(jsonl([COMPLETION]))
    job_id = dataset_job(tmp_path)
    params = validate({"variants": [TINY], "dataset": {"job": job_id}})
    assert params["dataset"] == {"job": job_id, "split": "test"}
    assert params["dataset_path"] == str(tmp_path / "test.jsonl")
    with pytest.raises(JobParamsError, match="has no valid split"):
        validate({"variants": [TINY], "dataset": {"job": job_id, "split": "valid"}})


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"variants": []}, "variants must be a list of 1 to 4 variants"),
        ({"variants": [TINY] * 5}, "variants must be a list of 1 to 4 variants"),
        ({"variants": TINY}, "variants must be a list"),
        ({"variants": ["nope"]}, "model 'nope' is not in the registry"),
        ({"variants": [{"model": TINY, "bits": 4}]}, "variants[0] has an unknown key 'bits'"),
        ({"variants": [{"adapter": ADAPTER}]}, "variants[0].model must be a model name"),
        ({"variants": [{"model": TINY, "adapter": "gone"}]}, "adapter 'gone' does not exist"),
        ({"variants": [{"model": TINY, "adapter": "a++b"}]}, "names joined with '+'"),
        ({"dataset": None}, 'dataset must be "builtin"'),
        ({"dataset": {"upload": "0" * 32}}, "not found"),
        ({"dataset": {"job": "x", "split": "dev"}}, "dataset.split must be one of"),
        ({"dataset": {"job": "not-a-uuid"}}, "dataset.job must be a job id"),
        ({"max_examples": 0}, "max_examples must be between 1 and 10000"),
        ({"max_examples": 2.5}, "max_examples must be an integer"),
        ({"metric": "bleu"}, "unknown param 'metric'"),
    ],
)
def test_validate_refuses(adapter, change, reason):
    params = {"variants": [TINY], "dataset": "builtin", **change}
    with pytest.raises(JobParamsError) as caught:
        validate(params)
    assert reason in str(caught.value)


def test_an_adapter_of_another_model_and_another_vocabulary(adapter, model_folder, tmp_path):
    model_register(name="smol", path=model_folder)
    with pytest.raises(JobParamsError, match=f"'{ADAPTER}' was trained on {TINY}, not smol"):
        validate({"variants": [{"model": "smol", "adapter": ADAPTER}], "dataset": "builtin"})
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 1000}))
    (other / "model.safetensors").write_bytes(b"")
    model_register(name="other-vocab", path=other)
    with pytest.raises(JobParamsError, match="vocabulary sizes differ"):
        validate({"variants": [TINY, "other-vocab"], "dataset": "builtin"})


# --- run --------------------------------------------------------------------------------


def test_identical_variants_get_identical_figures_and_an_adapter_others(adapter, tmp_path):
    params = validate(
        {"variants": [TINY, {"model": TINY, "adapter": ADAPTER}, TINY], "dataset": "builtin",
         "max_examples": 6}
    )  # fmt: skip
    ctx = RecordingContext(params=params, workdir=tmp_path)
    result = run(ctx).summary
    base, tuned, again = result["variants"]
    assert set(base) == {
        "name", "adapter", "perplexity", "loss", "accuracy", "exact_match", "examples", "tokens",
        "tokens_per_second", "peak_memory_bytes", "bits_per_weight",
    }  # fmt: skip
    assert base["bits_per_weight"] == tuned["bits_per_weight"] == 32  # the tiny one is float32
    for key in ("perplexity", "accuracy", "exact_match", "tokens", "examples"):
        assert base[key] == again[key], key
    assert base["tokens"] == tuned["tokens"] == result["dataset"]["tokens"] > 0
    assert tuned["adapter"] == ADAPTER and tuned["perplexity"] != base["perplexity"]
    assert math.isfinite(base["perplexity"]) and base["perplexity"] > 1
    assert base["tokens_per_second"] > 0 and base["peak_memory_bytes"] > 0
    assert result["dataset"] == {
        "source": "builtin", "label": "builtin (basic.jsonl)", "examples": 6,
        "available": len(read_eval_file(BUILTIN_PATH)), "multiple_choice": 3,
        "exact_answer": 3, "perplexity_only": 0, "tokens": base["tokens"],
    }  # fmt: skip
    fractions = [fraction for fraction, _ in ctx.progress_reports]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert len([m for _, m in ctx.progress_reports if ": example " in m]) == 18
    details = [json.loads(line) for line in (tmp_path / "examples.jsonl").read_text().splitlines()]
    assert len(details) == 18 and {row["variant"] for row in details} == {0, 1, 2}


def test_cancel_stops_between_examples(tiny, tmp_path):
    params = validate({"variants": [TINY, TINY], "dataset": "builtin"})
    ctx = RecordingContext(params=params, workdir=tmp_path, cancel_after_checks=5)
    with pytest.raises(JobCancelled):
        run(ctx)
    scored = [m for _, m in ctx.progress_reports if ": example " in m]
    assert 0 < len(scored) < 5
