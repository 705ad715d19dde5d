"""Resumable generation on the real model: checkpoint keys, an interrupted generation
resumed exactly, and the checkpoint files' bounds."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.engine.caching.checkpoints import SUFFIX, CheckpointConfig, CheckpointStore
from inference.engine.caching.disk_writer import DiskWriter
from inference.engine.drafts.fill import CallShape, FillPlan
from inference.engine.prompting.request import Resume
from inference.protocol.grammar import GrammarSpec
from inference.protocol.sampling import HlgParams, KVLayer, KVScheme, SamplingParams
from inference.protocol.wire import ChatInput, GenerateCall

from .helpers import generate, submit

TEXT = GenerateCall(text="(the prompt's tokens are the request's)")
STORY = "Write a long story about a dragon who learns to sail."


@pytest.fixture(scope="module")
def engine(model_folder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints")
    config = EngineConfig(checkpoints=CheckpointConfig(folder=folder, every=4))
    engine = Engine(lambda: load_model(model_folder), config=config).start()
    yield engine
    engine.shutdown()


def plan(engine: Engine, request: GenerationRequest, call: GenerateCall = TEXT):
    return engine.runner.checkpoints.plan(call, request, engine.runner.identity)


def story(engine: Engine, **sampling) -> GenerationRequest:
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": STORY}], add_generation_prompt=True
    )
    return GenerationRequest(list(prompt), max_tokens=48, sampling=SamplingParams(**sampling))


def interrupted(
    engine: Engine, request: GenerationRequest, after: int = 10, call: GenerateCall = TEXT
) -> str:
    """Start `request`, cancel it (the client gone) once `after` deltas arrived; its text."""
    run = submit(engine, plan(engine, request, call))
    deadline = time.monotonic() + 60
    while len(run.deltas) < after:
        assert time.monotonic() < deadline and run.end is None, run.end
        time.sleep(0.005)
    engine.cancel(run.request_id)
    time.sleep(0.2)  # the cancel lands at the next step
    assert engine.writer.flush(10)
    return "".join(delta.text for delta in run.deltas)


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0.8, "seed": 11},
        {"temperature": 0.0},
        {"temperature": 0.8, "seed": 11, "hlg": HlgParams()},
    ],
    ids=["seeded", "greedy", "seeded-hlg"],
)
def test_an_interrupted_generation_resumes_into_the_uninterrupted_text(engine, sampling):
    request = story(engine, **sampling)
    whole = generate(engine, plan(engine, request))
    assert whole.end.resumed_from == 0
    seen = interrupted(engine, request)
    retry = plan(engine, request)
    assert len(retry.resume.tokens) >= 10  # checkpointed when the client left
    resumed = generate(engine, retry)
    assert resumed.text == whole.text and resumed.text.startswith(seen)
    assert resumed.end.resumed_from == len(retry.resume.tokens)
    assert resumed.end.completion_tokens == whole.end.completion_tokens
    engine.writer.flush(10)
    assert plan(engine, request).resume.tokens == ()  # finished: its checkpoint is gone


def test_a_resumed_request_with_logprobs_gets_them_for_its_new_tokens(engine):
    # A checkpoint keeps tokens, not their distributions: the replayed ones go out as text
    # only, and the engine serves on (a replay that raised once stopped its thread).
    request = dataclasses.replace(story(engine, temperature=0.0), max_tokens=12, logprobs=True)
    whole = generate(engine, request)
    replayed = [entry.token_id for delta in whole.deltas for entry in delta.logprobs][:5]
    resume = Resume("r" * 64, tuple(replayed), None)
    resumed = generate(engine, dataclasses.replace(request, resume=resume))
    entries = [entry.token_id for delta in resumed.deltas for entry in delta.logprobs]
    assert resumed.text == whole.text and resumed.end.resumed_from == 5
    assert replayed + entries == [e.token_id for d in whole.deltas for e in d.logprobs]
    assert generate(engine, request).text == whole.text


def test_a_request_without_a_seed_resumes_on_the_seed_its_first_attempt_drew(engine):
    request = story(engine, temperature=0.8)
    seen = interrupted(engine, request)
    retry = plan(engine, request)
    drawn = retry.sampling.seed
    assert drawn is not None and len(retry.resume.tokens) >= 10
    resumed = generate(engine, retry)
    assert resumed.text.startswith(seen)
    # The same request with that seed set by the client, uninterrupted: the same text.
    explicit = dataclasses.replace(
        request, sampling=dataclasses.replace(request.sampling, seed=drawn)
    )
    assert generate(engine, plan(engine, explicit)).text == resumed.text
    # Fresh requests without a seed draw fresh seeds.
    assert plan(engine, request).sampling.seed not in (None, drawn)


def test_structured_output_resumes_with_its_grammar_where_it_stopped(engine, model_folder):
    from inference.engine.prompting.prompt import PromptBuilder

    spec = GrammarSpec("regex", "[A-Za-z ,]{60,120}\\.")  # a sentence of at least 60
    call = GenerateCall(
        chat=ChatInput(messages=[{"role": "user", "content": STORY}], structured=spec),
        max_tokens=40,
        sampling=SamplingParams(temperature=0.8, seed=3),
    )
    request = PromptBuilder(engine.loaded).build(call).request
    whole = generate(engine, plan(engine, request, call))
    interrupted(engine, request, after=4, call=call)
    retry = plan(engine, request, call)
    assert retry.resume.tokens
    assert generate(engine, retry).text == whole.text


SHAPE = CallShape('<tool_call>{"name": "', '", "arguments": ', "}</tool_call>")


def test_the_key_holds_every_field_that_changes_the_continuation(engine):
    base = story(engine, temperature=0.8)
    key = plan(engine, base).resume.key
    assert plan(engine, base).resume.key == key  # a drawn seed is not part of it
    variants = [
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.8, seed=1)),
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.8, seed=2)),
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.7)),
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.8, top_k=5)),
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.8, hlg=HlgParams())),
        dataclasses.replace(base, sampling=SamplingParams(temperature=0.8, hlg=HlgParams(toe=5))),
        dataclasses.replace(base, stop=("dragon",)),
        dataclasses.replace(base, stop=("dragon", "sail")),
        dataclasses.replace(base, stop=("sail", "dragon")),
        dataclasses.replace(base, max_tokens=47),
        dataclasses.replace(base, prompt_tokens=base.prompt_tokens[:-1]),
        dataclasses.replace(base, kv=KVScheme(bits=8)),
        # kv_config: its layers and its start, beside kv_bits
        dataclasses.replace(base, kv=KVScheme(start=0, layers=(KVLayer(8), None) * 15)),
        dataclasses.replace(base, kv=KVScheme(start=0, layers=(None, KVLayer(8)) * 15)),
        dataclasses.replace(base, kv=KVScheme(start=9, layers=(None, KVLayer(8)) * 15)),
        dataclasses.replace(base, cache_scope="user:2"),
        dataclasses.replace(base, fill=FillPlan("strict", "<tool_call>", SHAPE)),
        dataclasses.replace(base, fill=FillPlan("echo", "<tool_call>", SHAPE)),
    ]
    keys = {plan(engine, request).resume.key for request in variants}
    assert len(keys) == len(variants) and key not in keys
    refused = dataclasses.replace(base, fill=FillPlan("strict", refused="logprobs"))
    assert plan(engine, refused).resume.key == key  # a plan that does not fill changes nothing
    assert plan(engine, dataclasses.replace(base, logprobs=True)).resume is None
    assert plan(engine, base, dataclasses.replace(TEXT, resumable=False)).resume is None


# -- the files, without a model -------------------------------------------------------


def test_a_torn_last_line_is_not_read_and_finishing_deletes(tmp_path):
    writer = DiskWriter()
    store = CheckpointStore(CheckpointConfig(folder=tmp_path), writer)
    resume = Resume("k" * 64, (), 5)
    saved = store.save(resume, [1, 2, 3], 0)
    saved = store.save(resume, [1, 2, 3, 4, 5], saved)
    writer.flush(10)
    assert store.read(resume.key) == (5, [1, 2, 3, 4, 5])
    path = tmp_path / f"{resume.key}{SUFFIX}"
    with open(path, "a") as file:
        file.write("[5, [6, 7")  # a write cut short by a kill
    assert store.read(resume.key) == (5, [1, 2, 3, 4, 5])
    store.finish(resume)
    assert store.read(resume.key) is None  # at once, before the file is gone
    writer.flush(10)
    assert not path.exists()
    writer.close()


def test_checkpoints_are_bounded_in_bytes_and_age(tmp_path):
    writer = DiskWriter()
    config = CheckpointConfig(folder=tmp_path, max_bytes=600, max_age_seconds=3600)
    store = CheckpointStore(config, writer)
    for index in range(4):
        store.save(Resume(f"{index:064d}", (), None), list(range(40)), 0)
        writer.flush(10)
        os.utime(tmp_path / f"{index:064d}{SUFFIX}", (1e9 + index, time.time() - 10 + index))
    old = tmp_path / f"{'9' * 64}{SUFFIX}"
    old.write_text("{}\n")
    os.utime(old, (0, time.time() - 7200))
    store._prune()
    left = sorted(path.stem[-4:] for path in tmp_path.iterdir())
    assert "9999" not in left  # past its age
    assert sum(path.stat().st_size for path in tmp_path.iterdir()) <= 600
    assert "0003" in left and "0000" not in left  # the oldest out first
    writer.close()
