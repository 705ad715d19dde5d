"""The engine on the real default model: batching, seeds, stops, cancel, faults."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from inference.engine import GenerationRequest
from inference.engine.loop import runner as runner_module
from inference.protocol.events import Failed, Finished
from inference.protocol.sampling import SamplingParams

from .helpers import chat_tokens, generate, submit


def greedy(engine, text: str, max_tokens: int = 12, **kwargs) -> GenerationRequest:
    return GenerationRequest(chat_tokens(engine, text), max_tokens=max_tokens, **kwargs)


def test_answers_the_capital_of_france(engine):
    run = generate(
        engine, greedy(engine, "What is the capital of France? Answer in one sentence.", 16)
    )
    assert isinstance(run.end, Finished)
    assert "Paris" in run.text


def test_length_finish_counts_tokens(engine):
    run = generate(engine, greedy(engine, "Write a long story about a dragon.", 5))
    assert run.end.finish_reason == "length"
    assert run.end.completion_tokens == 5
    assert run.end.prompt_tokens == len(chat_tokens(engine, "Write a long story about a dragon."))


def test_stop_string_across_token_boundaries(engine):
    prompt = "Write a long story about a dragon."
    full = generate(engine, greedy(engine, prompt, 16, logprobs=True))
    tokens = [entry.token for delta in full.deltas for entry in delta.logprobs]
    # A stop string that starts inside one token and ends inside a later one.
    boundary = len(tokens[0]) + len(tokens[1])
    stop = full.text[boundary - 2 : boundary + 3]
    assert len(stop) == 5 and stop not in full.text[: boundary - 2]
    stopped = generate(engine, greedy(engine, prompt, 16, stop=(stop,)))
    assert stopped.end.finish_reason == "stop"
    assert stopped.end.stop_sequence == stop
    assert stopped.text == full.text[: full.text.index(stop)]
    assert all(stop not in delta.text for delta in stopped.deltas)


def test_greedy_output_is_the_same_alone_and_batched(engine):
    prompts = ["Name a fruit.", "What is 2 plus 2?", "Say hello in French."]
    alone = [generate(engine, greedy(engine, p, 8)).text for p in prompts]
    runs = [submit(engine, greedy(engine, p, 8)) for p in prompts]
    assert [run.wait().text for run in runs] == alone


def test_seeded_sampling_is_reproducible_when_batched(engine):
    sampling = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)
    request = greedy(engine, "Invent a name for a cat.", 8, sampling=sampling)
    alone = generate(engine, request).text
    noise = [
        submit(
            engine, greedy(engine, "Tell me a joke.", 8, sampling=SamplingParams(temperature=1.0))
        )
        for _ in range(2)
    ]
    batched = submit(engine, request)
    assert batched.wait().text == alone
    for run in noise:
        run.wait()
    other_seed = SamplingParams(temperature=1.0, top_p=0.95, seed=99)
    texts = {
        generate(engine, greedy(engine, "Invent a name for a cat.", 8, sampling=other_seed)).text
    }
    texts.add(alone)
    assert len(texts) == 2, "a different seed should sample differently"


def test_cancel_frees_the_slot(engine):
    run = submit(engine, greedy(engine, "Write a long story about a dragon.", 200))
    deadline = time.monotonic() + 60
    while not run.deltas and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.deltas, "no text arrived"
    engine.cancel(run.request_id)
    while engine.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.in_flight == 0
    # No more text: only the tally of what it cost (the usage record counts a hang-up).
    deltas = len(run.deltas)
    assert run.end.finish_reason == "cancelled"
    assert run.end.completion_tokens >= deltas and run.end.prompt_tokens > 0
    time.sleep(0.2)
    assert len(run.deltas) == deltas


def test_a_failing_request_fails_alone(engine, monkeypatch):
    real = runner_module.build_logits_processors

    def processors(sampling, *grammar):
        if sampling.logit_bias == {0: -0.5}:  # the marked request breaks mid-step

            def broken(tokens, logits):
                raise RuntimeError("processor exploded")

            return [broken]
        return real(sampling, *grammar)

    monkeypatch.setattr(runner_module, "build_logits_processors", processors)
    healthy = greedy(engine, "Name a fruit.", 8)
    expected = generate(engine, healthy).text
    bad = submit(
        engine, greedy(engine, "Name a fruit.", 8, sampling=SamplingParams(logit_bias={0: -0.5}))
    )
    good = submit(engine, healthy)
    assert isinstance(bad.wait().end, Failed)
    assert "processor exploded" in bad.end.message
    assert good.wait().text == expected
    assert engine.alive and engine.in_flight == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"top_logprobs": 12}, "top_logprobs must be at most 11"),
        ({"stop": ("",)}, "stop sequences must be nonempty strings"),
    ],
)
def test_requests_check_themselves(kwargs, message):
    fields = {"prompt_tokens": [1, 2], "max_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        GenerationRequest(**fields)


def test_sampling_params_check_themselves():
    with pytest.raises(ValueError, match="top_p must be between 0 and 1"):
        SamplingParams(top_p=1.5)


EXIT_AFTER_SHUTDOWN = """
import sys
sys.path.insert(0, sys.argv[1])
from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.engine.caching.prompt_cache import PromptCacheConfig
from tests.engine.helpers import generate
config = EngineConfig(max_batch_size=2, prompt_cache=PromptCacheConfig(max_entries=0))
engine = Engine(lambda: load_model(sys.argv[2]), config=config).start()
prompt = engine.tokenizer.encode(" ".join(["The river ran past the old mill."] * 60))
for _ in range(4):
    generate(engine, GenerationRequest(prompt, max_tokens=1))
engine.shutdown()
print("shut down", flush=True)
"""


def test_a_process_exits_cleanly_after_shutting_its_engine_down(model_folder):
    # The engine thread's C++ thread-local destructors (one takes the GIL) outlived join();
    # a script that exited right after shutdown() aborted with status 134.
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", EXIT_AFTER_SHUTDOWN, root, str(model_folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "shut down" in done.stdout
    assert "terminate called" not in done.stderr
