"""Draft models: a lab-made quantized copy of the default model drafts for it, inside
continuous batching, beside plain and prompt-lookup rows; the output stays the target's."""

from __future__ import annotations

import pytest

from inference.engine.drafts.draft_model import DraftModels, vocabulary
from inference.engine.drafts.drafting import DraftPlan
from inference.engine.prompting.prompt import PromptBuilder, PromptRejected
from inference.protocol.events import Finished
from inference.protocol.sampling import SamplingParams
from inference.protocol.vocabulary import vocabulary_difference
from inference.protocol.wire import ChatInput, GenerateCall
from tests.conftest import DEFAULT_MODEL, DRAFT_MODEL, OTHER_VOCAB

from .helpers import generate, submit
from .test_speculative import PROMPTS, logprob_values, token_ids
from .test_speculative import request as long_request

TOKENS = 24  # each drafting row runs the draft model too: short replies on a shared CPU


def request(engine, key: str, **kwargs):
    return long_request(engine, key, **{"max_tokens": TOKENS, **kwargs})


@pytest.fixture(scope="module")
def plain(engine):
    return {key: generate(engine, request(engine, key)) for key in PROMPTS}


@pytest.fixture(scope="module")
def drafted(draft_model_folder):
    return DraftPlan("model", model_path=str(draft_model_folder))


def test_greedy_draft_model_changes_no_token_in_a_mixed_batch(engine, plain, drafted):
    runs = {("plain", key): submit(engine, request(engine, key)) for key in ("code", "story")} | {
        ("draft", key): submit(engine, request(engine, key, draft=drafted)) for key in PROMPTS
    }
    runs[("ngram", "code")] = submit(engine, request(engine, "code", draft=DraftPlan()))
    for (kind, key), run in runs.items():
        assert isinstance(run.wait(600).end, Finished), (kind, key, run.end)
        assert token_ids(run) == token_ids(plain[key]), (kind, key)
        assert logprob_values(run) == logprob_values(plain[key]), (kind, key)
    for key in PROMPTS:
        end = runs[("draft", key)].end
        assert end.speculative
        assert end.accepted_prediction_tokens <= end.completion_tokens
    # A coarser quantized copy of the model agrees with it on most tokens.
    kept = sum(runs[("draft", key)].end.accepted_prediction_tokens for key in PROMPTS)
    assert kept > len(PROMPTS) * 4


def test_alone_a_draft_model_s_counts_add_up(engine, plain, drafted):
    before = (engine.stats.drafted_tokens, engine.stats.accepted_tokens)
    run = generate(engine, request(engine, "story", draft=drafted))
    drafted_now = engine.stats.drafted_tokens - before[0]
    accepted_now = engine.stats.accepted_tokens - before[1]
    assert token_ids(run) == token_ids(plain["story"])
    end = run.end
    assert end.accepted_prediction_tokens + end.rejected_prediction_tokens == drafted_now > 0
    assert end.accepted_prediction_tokens == accepted_now > 0


def test_seeded_sampling_draws_the_same_with_a_draft_model(engine, drafted):
    sampling = SamplingParams(temperature=0.9, top_p=0.95, seed=99)
    alone = generate(engine, request(engine, "list", sampling=sampling))
    noise = submit(engine, request(engine, "story", sampling=SamplingParams(temperature=1.0)))
    with_draft = submit(engine, request(engine, "list", sampling=sampling, draft=drafted))
    assert token_ids(with_draft.wait(600)) == token_ids(alone)
    noise.wait(600)


def test_num_draft_tokens_caps_a_draft_model_s_drafts(engine, draft_model_folder):
    plan = DraftPlan("model", num_draft_tokens=1, model_path=str(draft_model_folder))
    before = (engine.stats.verify_steps, engine.stats.drafted_tokens)
    generate(engine, request(engine, "list", max_tokens=12, draft=plan))
    steps = engine.stats.verify_steps - before[0]
    assert engine.stats.drafted_tokens - before[1] == steps > 0


def _call(name: str, folder) -> GenerateCall:
    chat = ChatInput(messages=[{"role": "user", "content": "Hi"}])
    return GenerateCall(chat=chat, max_tokens=4, draft_model=name, draft_path=str(folder))


def test_a_draft_model_with_another_vocabulary_is_refused(
    engine, draft_model_folder, other_vocabulary_folder
):
    builder = PromptBuilder(engine.loaded, draft_models=DraftModels(), name=DEFAULT_MODEL)
    plan = builder.build(_call(DRAFT_MODEL, draft_model_folder)).request.draft
    assert plan == DraftPlan("model", model_path=str(draft_model_folder))
    with pytest.raises(PromptRejected) as refused:
        builder.build(_call(OTHER_VOCAB, other_vocabulary_folder))
    message = refused.value.message
    assert DEFAULT_MODEL in message and OTHER_VOCAB in message, message
    assert f"{DEFAULT_MODEL} has 49152 tokens, {OTHER_VOCAB} 49153" in message
    assert f"0 only in {DEFAULT_MODEL}, 1 only in {OTHER_VOCAB}" in message
    assert refused.value.param == "draft_model"


def test_vocabulary_differences_in_words(engine):
    own = vocabulary(engine.tokenizer)
    assert vocabulary_difference(own, dict(own)) is None
    swapped = {**own, "a": own["b"], "b": own["a"]}
    expected = f"target has {len(own)} tokens, draft {len(own)}; 2 with other ids"
    assert vocabulary_difference(own, swapped) == expected
