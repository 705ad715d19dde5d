"""First tokens in the call that finished the prefill (generator.py), on the real default
model: sooner than mlx-lm's own BatchGenerator, the same tokens, and the prompt cache's
boundaries still stored."""

from __future__ import annotations

from mlx_lm.generate import BatchGenerator

from inference.engine import GenerationRequest
from inference.engine.loop import batch_caches
from inference.engine.loop.generator import Generator
from inference.protocol.sampling import KVScheme

from .helpers import Run, chat_tokens, generate

OPTIONS = {"completion_batch_size": 4, "prefill_batch_size": 4}


def calls_to_first_token(generator, prompt: list[int]) -> int:
    (uid,) = generator.insert([prompt], [8])
    calls = 0
    while True:
        calls += 1
        _, generated = generator.next()
        if any(response.uid == uid for response in generated):
            generator.close()
            return calls


def test_the_first_token_comes_out_of_the_call_that_prefills_the_prompt(engine):
    model = engine.loaded.model
    prompt = chat_tokens(engine, "Name three rivers.")
    # mlx-lm: prefill less the last token, then the last token's forward, then a step.
    assert calls_to_first_token(BatchGenerator(model, **OPTIONS), prompt) == 3
    assert calls_to_first_token(Generator(model, **OPTIONS), prompt) == 1


def test_a_joining_row_s_first_token_goes_out_once_and_decoding_rows_keep_their_pace(engine):
    model = engine.loaded.model
    generator = Generator(model, **OPTIONS)
    (first,) = generator.insert([chat_tokens(engine, "Count to twenty.")], [12])
    tokens = {first: []}
    for _ in range(3):
        for response in generator.next_generated():
            tokens[first].append(response.token)
    (second,) = generator.insert([chat_tokens(engine, "Say hello in French.")], [12])
    tokens[second] = []
    calls = []
    while len(generator.decoding):
        _, generated = generator.next()
        calls.append([response.uid for response in generated])
        for response in generated:
            tokens[response.uid].append(response.token)
    generator.close()
    # Joining: one token each. Then the step that feeds the second row's first token
    # hands out nothing for it: that token went out already.
    assert calls[0] == [first, second]
    assert calls[1] == [first]
    assert len(tokens[first]) == len(tokens[second]) == 12  # max_tokens, no more, no less


def test_a_row_that_ends_on_its_first_token_leaves_as_it_joins(engine):
    model = engine.loaded.model
    generator = Generator(model, **OPTIONS)
    (uid,) = generator.insert([chat_tokens(engine, "Name three rivers.")], [1])
    _, generated = generator.next()
    (response,) = generated
    assert (response.uid, response.finish_reason) == (uid, "length")
    assert len(generator.decoding) == 0
    # Its cache holds what its tokens say: the prompt, the first token not fed yet.
    assert response.prompt_cache[0].offset == len(response.all_tokens)
    generator.close()


def test_identical_prompts_arriving_together_still_prefill_once(engine):
    prompt = chat_tokens(engine, "Describe a lighthouse in one sentence.")
    runs = [Run() for _ in range(3)]
    request = GenerationRequest(prompt, max_tokens=6, cache_scope="first-token-followers")
    engine.submit_many([(request, run.emit) for run in runs])
    leader, *followers = [run.wait() for run in runs]
    assert leader.end.cached_tokens == 0
    # The leader's prompt less its last token was stored before its row moved on.
    assert [run.end.cached_tokens for run in followers] == [len(prompt) - 1] * 2
    assert {run.text for run in runs} == {leader.text}


def test_rows_join_only_while_the_generation_batch_has_room(engine):
    model = engine.loaded.model
    prompt = chat_tokens(engine, "Explain in detail how a lighthouse keeps ships safe.")
    # Two rows at most generate; 16-token prefill chunks keep the long prompts waiting.
    generator = Generator(
        model, completion_batch_size=2, prefill_batch_size=2, prefill_step_size=16
    )
    budgets = {}
    for tokens, max_tokens in ((prompt[:5], 12), (prompt, 4)):
        (uid,) = generator.insert([tokens], [max_tokens])
        budgets[uid] = max_tokens
    produced = dict.fromkeys(budgets, 0)
    widest = 0
    for call in range(200):
        if call == 1:  # one chunk shorter, one call later: both prefills end in one call
            (uid,) = generator.insert([prompt[16:]], [4])
            budgets[uid], produced[uid] = 4, 0
        for response in generator.next_generated():
            produced[response.uid] += 1
        widest = max(widest, len(generator.decoding))
        if produced == budgets:
            break
    generator.close()
    assert produced == budgets
    assert widest == 2  # full, never over (mlx-lm's own admission does not check)


def test_a_row_moved_to_a_quantized_lane_as_it_joins_hands_its_first_token_out_once(engine):
    prompt = chat_tokens(engine, "Name a bird.")
    # Past its quantized start once prefilled: it moves lanes in the call it joins.
    request = GenerationRequest(prompt, max_tokens=6, logprobs=True, kv=KVScheme(8, 64, 4))
    run = generate(engine, request)
    tokens = [entry.token_id for delta in run.deltas for entry in delta.logprobs]
    assert run.end.completion_tokens == len(tokens) == 6
    plain = generate(engine, GenerationRequest(prompt, max_tokens=1, logprobs=True))
    assert tokens[0] == plain.deltas[0].logprobs[0].token_id  # sampled before the move


def tokens_by_uid(generator, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    uids = generator.insert(prompts, [max_tokens] * len(prompts))
    tokens = {uid: [] for uid in uids}
    while any(len(t) < max_tokens for t in tokens.values()):
        for response in generator.next_generated():
            tokens[response.uid].append(response.token)
    generator.close()
    return [tokens[uid] for uid in uids]


def test_a_prompt_batch_whose_every_row_is_prefilled_moves_on_without_a_copy(engine, monkeypatch):
    model = engine.loaded.model
    question = chat_tokens(engine, "Explain in detail how a lighthouse keeps ships safe.")
    # 16-token chunks: the short prompt is prefilled a call sooner and splits off alone;
    # the long one then leaves a prompt batch of its own, whole.
    options = dict(OPTIONS, prefill_step_size=16)
    prompts = [question[:9], question]
    want = tokens_by_uid(BatchGenerator(model, **options), prompts, 5)
    want_lone = tokens_by_uid(BatchGenerator(model, **OPTIONS), [question], 5)
    splits = []
    split = batch_caches.split
    monkeypatch.setattr(
        batch_caches,
        "split",
        lambda caches, rows, rest: splits.append(rows) or split(caches, rows, rest),
    )
    ours = Generator(model, **options)
    assert tokens_by_uid(ours, prompts, 5) == want
    assert splits == [[0]]
    # A lone prompt: no split at all, and the generator's prompt batch is ready for more.
    ours = Generator(model, **OPTIONS)
    assert tokens_by_uid(ours, [question], 5) == want_lone
    assert splits == [[0]]
    assert len(ours.prefilling) == 0 and ours.prefilling.caches == []
