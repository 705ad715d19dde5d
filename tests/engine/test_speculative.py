"""Speculative decoding inside continuous batching, on the real default model: drafts from
prompt lookup and from a prediction change how fast tokens come, never which ones."""

from __future__ import annotations

import pytest

from inference.engine import GenerationRequest
from inference.engine.drafts.drafting import Drafter, DraftPlan, NgramIndex
from inference.engine.prompting.grammar import GrammarCompiler
from inference.protocol.events import Finished
from inference.protocol.grammar import GrammarSpec
from inference.protocol.sampling import KVScheme, SamplingParams

from .helpers import chat_tokens, generate, submit

CODE = '''def area(width, height):
    """The area of a rectangle."""
    return width * height


def perimeter(width, height):
    """The perimeter of a rectangle."""
    return 2 * (width + height)
'''
PROMPTS = {
    "code": "Rewrite this code with type hints and output only the code:\n\n" + CODE,
    "list": "List the numbers from one to twenty in words, one per line.",
    "story": "Write a short story about a lighthouse keeper.",
}
TOKENS = 48


def request(engine, key: str, **kwargs) -> GenerationRequest:
    options = {"max_tokens": TOKENS, "logprobs": True, **kwargs}
    return GenerationRequest(chat_tokens(engine, PROMPTS[key]), **options)


def token_ids(run) -> list[int]:
    return [entry.token_id for delta in run.deltas for entry in delta.logprobs]


def logprob_values(run) -> list[float]:
    return [entry.logprob for delta in run.deltas for entry in delta.logprobs]


def prediction_of(engine, text: str) -> tuple[int, ...]:
    return tuple(engine.tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def plain(engine):
    """Each prompt's greedy output without drafts, alone."""
    return {key: generate(engine, request(engine, key)) for key in PROMPTS}


def counts(engine) -> tuple[int, int, int]:
    stats = engine.stats
    return stats.verify_steps, stats.drafted_tokens, stats.accepted_tokens


def test_greedy_drafts_change_no_token_in_a_mixed_batch(engine, plain):
    before = counts(engine)
    own = {key: prediction_of(engine, run.text) for key, run in plain.items()}
    runs = {("plain", key): submit(engine, request(engine, key)) for key in PROMPTS} | {
        ("ngram", key): submit(engine, request(engine, key, draft=DraftPlan())) for key in PROMPTS
    }
    runs[("prediction", "code")] = submit(
        engine, request(engine, "code", draft=DraftPlan(prediction=prediction_of(engine, CODE)))
    )
    runs[("own prediction", "story")] = submit(
        engine, request(engine, "story", draft=DraftPlan(prediction=own["story"]))
    )
    for (kind, key), run in runs.items():
        assert isinstance(run.wait().end, Finished), (kind, key, run.end)
        assert token_ids(run) == token_ids(plain[key]), (kind, key)
        assert run.text == plain[key].text, (kind, key)
        # Logprobs too: a verifying pass computes each position as a plain step does.
        assert logprob_values(run) == logprob_values(plain[key]), (kind, key)
        end = run.end
        assert end.speculative == (kind != "plain")
        if kind == "plain":
            assert end.accepted_prediction_tokens == end.rejected_prediction_tokens == 0
        assert end.accepted_prediction_tokens <= end.completion_tokens
    steps, drafted, accepted = (
        now - then for now, then in zip(counts(engine), before, strict=True)
    )
    assert steps > 0 and drafted >= accepted > 0
    # Its own output as the prediction: every draft is kept (9 rows leave no room for
    # drafts, 15 positions a pass, until the batch narrows).
    own_run = runs[("own prediction", "story")].end
    assert own_run.rejected_prediction_tokens == 0 < own_run.accepted_prediction_tokens


def test_alone_most_tokens_come_from_a_right_prediction(engine, plain):
    own = prediction_of(engine, plain["story"].text)
    run = generate(engine, request(engine, "story", draft=DraftPlan(prediction=own)))
    assert token_ids(run) == token_ids(plain["story"])
    assert run.end.rejected_prediction_tokens == 0
    assert run.end.accepted_prediction_tokens > run.end.completion_tokens * 3 // 4


def test_accepted_and_rejected_add_up_to_the_drafts(engine):
    # A prediction that is only partly right: some drafts kept, some refused.
    wrong = CODE.replace("rectangle", "triangle").replace("width", "w")
    plan = DraftPlan(prediction=prediction_of(engine, wrong), num_draft_tokens=6)
    before = counts(engine)
    run = generate(engine, request(engine, "code", draft=plan))
    steps, drafted, accepted = (
        now - then for now, then in zip(counts(engine), before, strict=True)
    )
    end = run.end
    assert end.accepted_prediction_tokens + end.rejected_prediction_tokens == drafted
    assert end.accepted_prediction_tokens == accepted  # no stop cut kept drafts off
    assert end.rejected_prediction_tokens > 0


def test_seeded_sampling_draws_the_same_with_drafts(engine):
    sampling = SamplingParams(temperature=0.9, top_p=0.95, seed=4321)
    alone = generate(engine, request(engine, "list", sampling=sampling))
    noise = submit(engine, request(engine, "story", sampling=SamplingParams(temperature=1.0)))
    drafted = submit(engine, request(engine, "list", sampling=sampling, draft=DraftPlan()))
    assert drafted.wait().text == alone.text
    assert token_ids(drafted) == token_ids(alone)
    noise.wait()


def test_penalties_see_the_drafts_they_judge(engine):
    sampling = SamplingParams(repetition_penalty=1.3, presence_penalty=0.5)
    alone = generate(engine, request(engine, "list", sampling=sampling))
    drafted = generate(engine, request(engine, "list", sampling=sampling, draft=DraftPlan()))
    assert token_ids(drafted) == token_ids(alone)


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 30])
def test_max_tokens_holds_with_drafts(engine, plain, max_tokens):
    own = prediction_of(engine, plain["story"].text)
    run = generate(
        engine,
        request(engine, "story", max_tokens=max_tokens, draft=DraftPlan(prediction=own)),
    )
    assert run.end.finish_reason == "length"
    assert run.end.completion_tokens == max_tokens
    assert token_ids(run) == token_ids(plain["story"])[:max_tokens]


def test_a_stop_string_inside_kept_drafts(engine, plain):
    text = plain["story"].text
    stop = text[len(text) // 2 : len(text) // 2 + 6]
    own = prediction_of(engine, text)
    expected = generate(engine, request(engine, "story", stop=(stop,)))
    run = generate(engine, request(engine, "story", stop=(stop,), draft=DraftPlan(prediction=own)))
    assert run.end.finish_reason == "stop" and run.text == expected.text
    end = run.end
    assert end.accepted_prediction_tokens <= end.completion_tokens


def test_the_prompt_cache_after_a_drafted_reply(engine, plain):
    """A finished row's cache is stored without the kept drafts past its last token: the
    next turn, reusing it, answers as it does after a plain reply."""
    scope = "speculative-cache"
    own = prediction_of(engine, plain["list"].text)
    first = generate(
        engine, request(engine, "list", cache_scope=scope, draft=DraftPlan(prediction=own))
    )
    assert first.text == plain["list"].text
    follow = list(chat_tokens(engine, PROMPTS["list"])) + token_ids(first)
    follow += list(engine.tokenizer.encode("\nAnd now in French.", add_special_tokens=False))
    cached = generate(engine, GenerationRequest(follow, max_tokens=12, cache_scope=scope))
    fresh = generate(engine, GenerationRequest(follow, max_tokens=12, cache_scope="elsewhere"))
    assert cached.end.cached_tokens > 0 and fresh.end.cached_tokens == 0
    assert cached.text == fresh.text


def test_quantized_kv_rows_verify_their_drafts(engine, plain):
    scheme = KVScheme(8, 64, 0)
    alone = generate(engine, request(engine, "story", kv=scheme))
    own = prediction_of(engine, alone.text)
    drafted = submit(engine, request(engine, "story", kv=scheme, draft=DraftPlan(prediction=own)))
    beside = submit(engine, request(engine, "list", draft=DraftPlan()))
    assert token_ids(drafted.wait()) == token_ids(alone)
    assert drafted.end.accepted_prediction_tokens > 0
    assert token_ids(beside.wait()) == token_ids(plain["list"])


def test_a_grammar_row_decodes_without_drafts(engine):
    compiler = GrammarCompiler(
        engine.tokenizer, engine.vocab_size, sorted(engine.tokenizer.eos_token_ids)
    )
    grammar = compiler.compile(GrammarSpec("regex", "(yes|no)[.]"))
    text = "Is the sky blue? Answer yes or no."
    constrained = GenerationRequest(chat_tokens(engine, text), max_tokens=8, grammar=grammar)
    expected = generate(engine, constrained)
    drafted = generate(
        engine,
        GenerationRequest(
            chat_tokens(engine, text),
            max_tokens=8,
            grammar=grammar,
            draft=DraftPlan(prediction=prediction_of(engine, "yes.")),
        ),
    )
    assert drafted.text == expected.text
    assert drafted.end.speculative
    assert drafted.end.accepted_prediction_tokens == drafted.end.rejected_prediction_tokens == 0


def test_ngram_index_finds_the_longest_earlier_match():
    index = NgramIndex(2, 4)
    tokens = [1, 2, 3, 4, 9, 2, 3, 4, 5, 1, 2, 3]
    index.extend(tokens, len(tokens))
    # n-grams ending before the last position (the one ending there is the suffix itself)
    assert index.find([7, 2, 3, 4]) == 8  # the latest [2, 3, 4], followed by 5
    assert index.find([0, 1, 2, 3]) == 3  # [1, 2, 3] earlier once, followed by 4
    assert index.find([6, 6]) is None
    assert index.find([2, 3], after=5) == 7  # the first at or after 5
    assert index.find([2, 3], after=9) == 7  # none after 9: the latest


def test_a_drafter_follows_its_prediction_and_backs_off():
    prediction = tuple(range(100, 140))
    drafter = Drafter(DraftPlan(prediction=prediction))
    history = [1, 2, 100, 101]
    draft = drafter.propose(history, 5)
    assert draft == [102, 103, 104, 105, 106]
    drafter.observe(5, 5)
    assert drafter.budget() >= 5
    for _ in range(6):  # nothing kept: fewer drafts a step, down to one
        drafter.observe(4, 0)
    assert drafter.budget() == 1
    assert Drafter(DraftPlan(num_draft_tokens=3)).budget() == 3
    assert drafter.proposed == 29 and drafter.rejected == 24


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "lookahead"}, "unknown draft method"),
        ({"num_draft_tokens": 0}, "num_draft_tokens must be between 1 and 64"),
        ({"num_draft_tokens": 65}, "num_draft_tokens must be between 1 and 64"),
    ],
)
def test_draft_plans_check_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DraftPlan(**kwargs)


SCHEMA = (
    '{"type": "object", "properties": {"name": {"type": "string"}, "colour": {"enum": '
    '["red", "green", "blue"]}, "legs": {"type": "integer"}}, "required": ["name", "colour", '
    '"legs"]}'
)


def test_a_grammar_s_forced_tokens_are_fast_forwarded_verified(engine, plain):
    compiler = GrammarCompiler(
        engine.tokenizer, engine.vocab_size, sorted(engine.tokenizer.eos_token_ids)
    )
    grammar = compiler.compile(GrammarSpec("json_schema", SCHEMA))
    prompt = chat_tokens(engine, "Describe an animal as JSON.")
    # logprobs asked for: no fast-forwarding (the reference); then without: fast-forwarded.
    expected = generate(engine, GenerationRequest(prompt, 40, grammar=grammar, logprobs=True))
    forwarded = generate(engine, GenerationRequest(prompt, 40, grammar=grammar))
    assert forwarded.text == expected.text
    assert expected.end.fast_forwarded_tokens == 0
    assert forwarded.end.fast_forwarded_tokens > 0
    assert not forwarded.end.speculative
    assert forwarded.end.accepted_prediction_tokens == forwarded.end.rejected_prediction_tokens
    # Beside plain and drafting rows, and twice at once (each matcher takes back its own).
    runs = [
        submit(engine, GenerationRequest(prompt, 40, grammar=grammar)),
        submit(engine, request(engine, "list", draft=DraftPlan())),
        submit(engine, GenerationRequest(prompt, 40, grammar=grammar)),
    ]
    assert runs[0].wait().text == expected.text
    assert token_ids(runs[1].wait()) == token_ids(plain["list"])
    assert runs[2].wait().text == expected.text
