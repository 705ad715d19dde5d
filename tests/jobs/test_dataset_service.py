"""The dataset job service: uploads checked line by line, sources, splits, mlx-lm's reading."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inference.model_registry import model_register
from inference.models import StoredResponse
from inference.response_store import response_store
from jobs import datasets
from jobs.context import JobCancelled, JobParamsError
from jobs.uploads import save_upload, upload_path
from lab.models import Conversation
from tests.jobs.recording_context import RecordingContext

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def chat_line(i: int) -> dict:
    return {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"What is {i} + 1?"},
            {"role": "assistant", "content": f"{i + 1}."},
        ]
    }


def example_line(fmt: str, i: int) -> dict:
    if fmt == "chat":
        return chat_line(i)
    if fmt == "tools":
        return {**chat_line(i), "tools": TOOLS}
    if fmt == "completions":
        return {"prompt": f"What is {i} + 1?", "completion": f"{i + 1}."}
    return {"text": f"Example number {i}, café ü."}


@pytest.fixture
def lab(db, settings, tmp_path, model_folder):
    """Uploads under tmp_path and the default model registered for token counting."""
    settings.MLXLAB = settings.MLXLAB.replace(uploads_dir=tmp_path / "var" / "uploads")
    model_register(name=settings.MLXLAB.default_model, path=model_folder)
    return tmp_path


@pytest.fixture(scope="module")
def mlx_tokenizer(model_folder):
    # mlx_lm is imported late: mlx.core must come after the BLAS inference.engine loads.
    from mlx_lm.tokenizer_utils import load

    return load(model_folder)


def upload(content: str | list, filename: str = "data.jsonl", owner_id: int = 1) -> str:
    if isinstance(content, list):
        content = "".join(
            (line if isinstance(line, str) else json.dumps(line)) + "\n" for line in content
        )
    return save_upload(io.BytesIO(content.encode("utf-8")), filename, owner_id)


def run_job(params: dict, workdir: Path, owner=None) -> tuple[RecordingContext, dict]:
    workdir.mkdir(parents=True)
    ctx = RecordingContext(params=datasets.validate(params, owner), workdir=workdir)
    return ctx, datasets.run(ctx).summary


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def mlx_lm_reads(workdir: Path, tokenizer) -> dict[str, list[int]]:
    """Each split as mlx-lm's trainer loads and tokenizes it: lengths in tokens."""
    from mlx_lm.tuner.datasets import load_local_dataset

    splits = load_local_dataset(workdir, tokenizer, SimpleNamespace())
    return {
        name: [len(split.process(split[i])[0]) for i in range(len(split))]
        for name, split in zip(datasets.SPLITS, splits, strict=True)
    }


def error_of(params: dict, owner=None) -> str:
    with pytest.raises(JobParamsError) as caught:
        datasets.validate(params, owner)
    return str(caught.value)


# Uploads in every format, read back by mlx-lm


@pytest.mark.parametrize("fmt", ["chat", "tools", "completions", "text"])
def test_every_format_from_jsonl_upload_is_what_mlx_lm_reads(lab, mlx_tokenizer, fmt):
    lines = [example_line(fmt, i) for i in range(20)]
    upload_id = upload(lines[:10] + ["", "   "] + lines[10:])  # blank lines are skipped
    ctx, summary = run_job({"format": fmt, "source": {"upload": upload_id}}, lab / "work")
    assert summary["format"] == fmt
    assert summary["source"] == "upload data.jsonl"
    assert summary["counts"] == {"train": 16, "valid": 2, "test": 2}
    assert summary["examples"] == 20
    written = [e for name in datasets.SPLITS for e in read_jsonl(lab / "work" / f"{name}.jsonl")]
    assert sorted(map(json.dumps, written)) == sorted(map(json.dumps, lines))
    lengths = mlx_lm_reads(lab / "work", mlx_tokenizer)
    assert {name: len(v) for name, v in lengths.items()} == summary["counts"]
    # The counts are the trainer's own: the same template, the same EOS rule.
    assert summary["tokens"] == {name: sum(v) for name, v in lengths.items()}
    assert summary["longest_example_tokens"] == max(max(v) for v in lengths.values())
    assert ctx.progress_reports[-1] == (1.0, "done")


def test_json_array_upload(lab):
    upload_id = upload(json.dumps([example_line("completions", i) for i in range(10)]), "a.json")
    params = datasets.validate({"format": "completions", "source": {"upload": upload_id}})
    # The normalised params are JSON, and validating them again changes nothing.
    assert datasets.validate(json.loads(json.dumps(params))) == params
    assert params["source"] == {
        "upload": upload_id, "path": str(upload_path(upload_id)), "filename": "a.json"
    }  # fmt: skip
    assert len(datasets.load_examples(params["source"], "completions")) == 10


@pytest.mark.parametrize(
    ("fmt", "csv_text", "expected"),
    [
        (
            "completions",
            'id,prompt,completion\n1,"Say hi","Hi!"\n\n2,"Two\nlines","Yes, two."\n',
            [{"prompt": "Say hi", "completion": "Hi!"},
             {"prompt": "Two\nlines", "completion": "Yes, two."}],
        ),
        ("text", "text,source\nFirst text,a\n\"Second, with comma\",b\n",
         [{"text": "First text"}, {"text": "Second, with comma"}]),
    ],
)  # fmt: skip
def test_completions_and_text_from_csv(lab, mlx_tokenizer, fmt, csv_text, expected):
    upload_id = upload(csv_text, "data.csv")
    split = {"train": 1.0}
    ctx, summary = run_job({"format": fmt, "source": {"upload": upload_id}, "split": split},
                           lab / "work")  # fmt: skip
    written = read_jsonl(lab / "work" / "train.jsonl")
    assert sorted(map(json.dumps, written)) == sorted(map(json.dumps, expected))
    assert summary["counts"] == {"train": 2, "valid": 0, "test": 0}
    assert not (lab / "work" / "valid.jsonl").exists()
    assert not (lab / "work" / "test.jsonl").exists()
    assert [len(v) for v in mlx_lm_reads(lab / "work", mlx_tokenizer).values()] == [2, 0, 0]


# Bad uploads


def test_bad_lines_are_reported_with_their_numbers_and_reasons(lab):
    bad_role = {"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]}
    no_reply = {"messages": [{"role": "user", "content": "hi"}]}
    lines = [chat_line(1), chat_line(2), bad_role, "", "[1, 2]", chat_line(3), "{not json",
             no_reply, {"messages": "hello"}, chat_line(4)]  # fmt: skip
    message = error_of({"format": "chat", "source": {"upload": upload(lines)}})
    assert message == (
        "line 3: messages[1].role must be one of system, user, assistant, tool; "
        "line 5: must be a JSON object; "
        "line 7: not valid JSON (Expecting property name enclosed in double quotes); "
        "line 8: messages must include an assistant message; "
        "line 9: messages must be a non-empty list"
    )


@pytest.mark.parametrize(
    ("fmt", "line", "reason"),
    [
        ("tools", chat_line(1), "tools must be a non-empty list"),
        ("tools", {**chat_line(1), "tools": [{"type": "function", "function": {}}]},
         "tools[0].function.name must be a non-empty string"),
        ("completions", {"prompt": "p", "completion": 3}, "completion must be a string"),
        ("text", {"text": ""}, "text must be a non-empty string"),
        ("text", {"prompt": "p"}, "text must be a non-empty string"),
        ("chat", {"messages": [{"role": "assistant"}]}, "messages[0].content must be a string"),
    ],
)  # fmt: skip
def test_format_rules(lab, fmt, line, reason):
    assert error_of({"format": fmt, "source": {"upload": upload([line])}}) == f"line 1: {reason}"


def test_tool_calls_without_content_are_accepted_in_the_tools_format(lab):
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}  # fmt: skip
    line = {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                         {"role": "assistant", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                         {"role": "assistant", "content": "Sunny."}],
            "tools": TOOLS}  # fmt: skip
    source = {"upload": upload([line] * 10)}
    assert "messages[1].content" in error_of({"format": "chat", "source": source})
    # The default model's template reads every message's content, so it cannot render
    # these (nor could mlx-lm train on them with it): counted on the plain text, and said.
    ctx, summary = run_job({"format": "tools", "source": source}, lab / "work")
    assert summary["template_failures"] == 10
    assert summary["tokens"]["train"] > 0
    assert "10 examples could not be rendered by the model's chat template" in ctx.lines[-1]


def test_a_file_of_only_bad_lines_and_the_cap_on_reported_lines(lab):
    message = error_of({"format": "text", "source": {"upload": upload(["{}"] * 25)}})
    assert message.startswith("line 1: text must be a non-empty string; line 2: ")
    assert message.count("line ") == 20
    assert message.endswith("line 20: text must be a non-empty string; and 5 more bad lines")
    assert error_of({"format": "text", "source": {"upload": upload(["", ""])}}) == (
        "the upload has no examples"
    )


def test_csv_errors(lab):
    missing = upload("question,completion\nq,a\n", "data.csv")
    assert error_of({"format": "completions", "source": {"upload": missing}}) == (
        "the CSV header lacks column(s) prompt needed by the completions format"
        " (it has: question, completion)"
    )
    short = upload("prompt,completion\nq,a\nonly a prompt\n", "data.csv")
    assert error_of({"format": "completions", "source": {"upload": short}}) == (
        "line 3: missing value for completion"
    )
    assert "cannot be read from CSV" in error_of({"format": "chat", "source": {"upload": short}})
    # A quoted field over two lines: the next row starts on line 4.
    quoted = upload('prompt,completion\n"two\nlines",x\nbad\n', "data.csv")
    assert error_of({"format": "completions", "source": {"upload": quoted}}) == (
        "line 4: missing value for completion"
    )


def test_refused_and_unknown_uploads(lab, settings):
    with pytest.raises(JobParamsError, match="only .jsonl, .json, .csv files"):
        upload("hello", "notes.txt")
    for upload_id in ["0" * 32, "../../etc/passwd", 42]:
        message = error_of({"format": "text", "source": {"upload": upload_id}})
        assert message == f"upload '{upload_id}' not found"
    settings.MLXLAB = settings.MLXLAB.replace(max_upload_bytes=100)
    with pytest.raises(JobParamsError, match="larger than the limit of 100 bytes"):
        upload([{"text": "x" * 200}])
    assert not list((lab / "var" / "uploads").glob("*.jsonl"))


def test_another_users_upload_is_not_found(lab, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    upload_id = upload([example_line("text", i) for i in range(10)], owner_id=alice.id)
    params = {"format": "text", "source": {"upload": upload_id}}
    assert datasets.validate(params, alice)["source"]["upload"] == upload_id
    assert error_of(params, bob) == f"upload '{upload_id}' not found"


def test_params_errors(lab):
    source = {"upload": upload([example_line("text", i) for i in range(5)])}
    cases = [
        ({"source": source}, "format must be one of chat, tools, completions, text"),
        ({"format": "text"}, "source must have exactly one of upload, conversations, responses"),
        ({"format": "text", "source": {**source, "conversations": "all"}}, "source must have"),
        ({"format": "text", "source": source, "split": {"train": 0.5, "valid": 0.4}},
         "split ratios must add up to 1"),
        ({"format": "text", "source": source, "split": {"train": 0, "valid": 1}},
         "split.train must be more than 0"),
        ({"format": "text", "source": source, "split": {"train": 1.1, "test": -0.1}},
         "split.test must be a number >= 0"),
        ({"format": "text", "source": source, "seed": "1"}, "seed must be an integer"),
        ({"format": "text", "source": source, "model": "nope"}, "model 'nope' is not registered"),
        ({"format": "text", "source": source, "epochs": 3}, "unknown parameter(s): epochs"),
        # 5 examples at 0.8/0.1/0.1: 4, 1, 0.
        ({"format": "text", "source": source},
         "5 examples are too few: the test split would get none; this split needs at least 7"
         " (or set its ratio to 0)"),
    ]  # fmt: skip
    for params, expected in cases:
        assert error_of(params).startswith(expected), params


# Splits


def test_split_counts_sum_to_the_total():
    for total in [1, 2, 3, 7, 10, 99, 1001]:
        for split in [datasets.DEFAULT_SPLIT, {"train": 0.7, "valid": 0.2, "test": 0.1},
                      {"train": 1 / 3, "valid": 1 / 3, "test": 1 / 3}, {"train": 1.0}]:  # fmt: skip
            split = {name: split.get(name, 0.0) for name in datasets.SPLITS}
            counts = datasets.split_counts(total, split)
            assert sum(counts.values()) == total
            assert all(abs(counts[n] - split[n] * total) < 1 for n in datasets.SPLITS)
    assert datasets.split_counts(10, datasets.DEFAULT_SPLIT) == {"train": 8, "valid": 1, "test": 1}
    assert datasets.split_counts(15, datasets.DEFAULT_SPLIT) == {"train": 12, "valid": 2, "test": 1}


def test_splits_are_deterministic_for_a_seed(lab):
    source = {"upload": upload([example_line("completions", i) for i in range(50)])}

    def files(seed: int, folder: str) -> dict[str, str]:
        run_job({"format": "completions", "source": source, "seed": seed}, lab / folder)
        return {n: (lab / folder / f"{n}.jsonl").read_text() for n in datasets.SPLITS}

    first, again, other = files(7, "a"), files(7, "b"), files(8, "c")
    assert first == again
    assert first != other
    assert sorted(first.values()) != sorted(other.values())
    assert [len(v.splitlines()) for v in first.values()] == [40, 5, 5]


# Lab conversations and stored responses


@pytest.fixture
def conversations(lab, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    capitals = Conversation.objects.create(owner=alice, system_prompt="Be brief.")
    for role, content in [("user", "Capital of France?"), ("assistant", "Paris."),
                          ("user", "And of Italy?"), ("assistant", "Rome."),
                          ("user", "Unanswered?")]:  # fmt: skip
        capitals.messages.create(role=role, content=content)
    greeting = Conversation.objects.create(owner=alice)
    greeting.messages.create(role="user", content="Hello")
    greeting.messages.create(role="assistant", content="")  # cut off: no text
    greeting.messages.create(role="assistant", content="Hi there.")
    Conversation.objects.create(owner=alice).messages.create(role="user", content="No reply")
    Conversation.objects.create(owner=bob).messages.create(role="assistant", content="Bob's")
    return SimpleNamespace(alice=alice, bob=bob, capitals=capitals, greeting=greeting)


def examples_of(params: dict, owner=None) -> list[dict]:
    validated = datasets.validate({"split": {"train": 1.0}, **params}, owner)
    return datasets.load_examples(validated["source"], validated["format"])


def test_conversations_become_chats(conversations):
    alice = conversations.alice
    assert examples_of({"format": "chat", "source": {"conversations": "all"}}, alice) == [
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Capital of France?"},
                      {"role": "assistant", "content": "Paris."},
                      {"role": "user", "content": "And of Italy?"},
                      {"role": "assistant", "content": "Rome."}]},
        {"messages": [{"role": "user", "content": "Hello"},
                      {"role": "assistant", "content": "Hi there."}]},
    ]  # fmt: skip
    assert examples_of(
        {"format": "completions", "source": {"conversations": [conversations.capitals.id]}}, alice
    ) == [{"prompt": "Capital of France?", "completion": "Paris."},
          {"prompt": "And of Italy?", "completion": "Rome."}]  # fmt: skip
    assert examples_of(
        {"format": "text", "source": {"conversations": [conversations.greeting.id]}}, alice
    ) == [{"text": "user: Hello\nassistant: Hi there."}]
    # No owner means every user's conversations.
    assert len(examples_of({"format": "chat", "source": {"conversations": "all"}})) == 3


def test_conversation_source_errors(conversations):
    alice, bob = conversations.alice, conversations.bob
    assert examples_of({"format": "text", "source": {"conversations": "all"}}, bob) == [
        {"text": "assistant: Bob's"}
    ]
    params = {"format": "chat", "source": {"conversations": [conversations.capitals.id, 999]}}
    assert error_of(params, alice) == "conversations not found: 999"
    params["source"] = {"conversations": [conversations.capitals.id]}
    assert error_of(params, bob) == f"conversations not found: {conversations.capitals.id}"
    assert error_of({"format": "tools", "source": {"conversations": "all"}}, alice) == (
        "lab conversations have no tool calls; use the chat format"
    )
    assert 'must be "all" or a non-empty list' in error_of(
        {"format": "chat", "source": {"conversations": []}}, alice
    )


def store_response(response_id: str, items: list, output: list, previous=None, **body):
    return response_store(
        body={"id": response_id, "model": "m", "output": output, "status": "completed", **body},
        input_items=items, instructions=body.pop("instructions", ""), previous_id=previous,
        owner="user:1",
    )  # fmt: skip


def message(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


@pytest.fixture
def responses(lab):
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather",
            "arguments": '{"city": "Oslo"}'}  # fmt: skip
    result = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    store_response("resp_1", [message("user", "Weather in Oslo?")], [call], tools=tools)
    store_response("resp_2", [result], [{"type": "reasoning", "summary": []},
                                        message("assistant", "Sunny.")],
                   previous="resp_1", instructions="Use tools.", tools=tools)  # fmt: skip
    store_response("resp_x", [{"type": "message", "role": "user", "content": "Hi"}],
                   [message("assistant", "Hello!")])  # fmt: skip


def test_responses_chains_become_chats(responses):
    # "all" takes each chain once, by its last response.
    assert examples_of({"format": "chat", "source": {"responses": "all"}}) == [
        {"messages": [{"role": "system", "content": "Use tools."},
                      {"role": "user", "content": "Weather in Oslo?"},
                      {"role": "assistant", "content": "Sunny."}]},
        {"messages": [{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}]},
    ]  # fmt: skip
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}  # fmt: skip
    assert examples_of({"format": "tools", "source": {"responses": ["resp_2"]}}) == [
        {"messages": [{"role": "system", "content": "Use tools."},
                      {"role": "user", "content": "Weather in Oslo?"},
                      {"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                      {"role": "assistant", "content": "Sunny."}],
         "tools": [{"type": "function", "function": {"name": "get_weather",
                                                     "parameters": {"type": "object"}}}]},
    ]  # fmt: skip
    assert examples_of({"format": "completions", "source": {"responses": ["resp_x"]}}) == [
        {"prompt": "Hi", "completion": "Hello!"}
    ]
    assert error_of({"format": "chat", "source": {"responses": ["resp_1"]}}) == (
        "the selected responses have no assistant replies to learn from"
    )
    assert error_of({"format": "chat", "source": {"responses": ["resp_9"]}}) == (
        "responses not found: resp_9"
    )


def test_stored_responses_are_the_owners_own_unless_staff_asks_for_everyones(
    responses, django_user_model, lab
):
    # The fixture's chains were stored by "user:1"; a second user stored one of their own.
    owner = django_user_model.objects.create_user("owner", is_staff=True)
    other = django_user_model.objects.create_user("other", is_staff=True)
    plain = django_user_model.objects.create_user("plain")
    StoredResponse.objects.filter(owner="user:1").update(owner=f"user:{owner.pk}")
    response_store(
        body={"id": "resp_o", "model": "m", "output": [message("assistant", "Other's.")],
              "status": "completed"},
        input_items=[message("user", "Mine?")], instructions="", previous_id=None,
        owner=f"user:{other.pk}",
    )  # fmt: skip

    def source(selection, who):
        return datasets.validate(
            {"format": "chat", "source": {"responses": selection}, "split": {"train": 1.0}}, who
        )["source"]

    assert source("all", owner) == {"responses": ["resp_2", "resp_x"]}
    assert source("all", other) == {"responses": ["resp_o"]}
    # Another user's id is as unknown as a made-up one: nothing says it exists.
    assert error_of({"format": "chat", "source": {"responses": ["resp_o"]}}, owner) == (
        "responses not found: resp_o"
    )
    everyone = source("everyone", other)
    assert everyone == {"responses": ["resp_2", "resp_x", "resp_o"], "of": "everyone"}
    assert error_of({"format": "chat", "source": {"responses": "everyone"}}, plain) == (
        "only staff may build a dataset from everyone's responses"
    )
    params = {"format": "chat", "source": {"responses": "everyone"}, "split": {"train": 1.0}}
    assert run_job(params, lab / "w", other)[1]["source"] == "3 response chains of every user"


def test_run_from_responses_writes_what_mlx_lm_reads(responses, mlx_tokenizer, lab):
    # Tool-call turns carry content "", which the default model's template can render.
    ctx, summary = run_job(
        {"format": "tools", "source": {"responses": "all"}, "split": {"train": 1.0}}, lab / "w"
    )
    assert summary["source"] == "2 response chains"
    assert summary["counts"] == {"train": 2, "valid": 0, "test": 0}
    assert summary["tokens"]["train"] == sum(mlx_lm_reads(lab / "w", mlx_tokenizer)["train"])
    assert "template_failures" not in summary


# Preview and cancel


def test_preview_pages(lab):
    source = {"upload": upload([example_line("text", i) for i in range(45)])}
    run_job({"format": "text", "source": source, "split": {"train": 1.0}}, lab / "work")
    written = read_jsonl(lab / "work" / "train.jsonl")
    first = datasets.preview(lab / "work", "train", 1)
    assert {k: v for k, v in first.items() if k != "examples"} == {
        "split": "train", "page": 1, "page_size": 20, "total": 45, "pages": 3
    }  # fmt: skip
    assert first["examples"] == written[:20]
    assert datasets.preview(lab / "work", "train", 3)["examples"] == written[40:]
    assert datasets.preview(lab / "work", "train", 2, page_size=40)["examples"] == written[40:]
    empty = datasets.preview(lab / "work", "valid", 1)
    assert (empty["total"], empty["pages"], empty["examples"]) == (0, 0, [])
    for split, page, reason in [("train", 4, "page 4 is past the last page (3)"),
                                ("train", 0, "page must be a positive integer"),
                                ("dev", 1, "split must be one of train, valid, test"),
                                ("valid", 2, "page 2 is past the last page (0)")]:  # fmt: skip
        with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            datasets.preview(lab / "work", split, page)


def test_cancel(lab):
    params = datasets.validate(
        {
            "format": "text",
            "source": {"upload": upload([example_line("text", i) for i in range(450)])},
        }
    )
    for checks in (0, 5):  # before reading; after the first 200 examples are written
        workdir = lab / f"work{checks}"
        workdir.mkdir()
        ctx = RecordingContext(params=params, workdir=workdir, cancel_after_checks=checks)
        with pytest.raises(JobCancelled):
            datasets.run(ctx)
    assert len((lab / "work5" / "train.jsonl").read_text().splitlines()) == 200
