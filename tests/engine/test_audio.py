"""An audio-capable model served by the engine through mlx-vlm (a tiny random-weight Gemma
3n): clips in the prompt, heard through its audio tower, rows batched with text rows, the
prompt cache keyed by the clips' content, and the tokens mlx-vlm's own generate gives."""

from __future__ import annotations

import hashlib

import pytest

from inference.engine import Engine, EngineConfig, load_model
from inference.engine.prompting.prompt import PromptBuilder, PromptRejected
from inference.protocol.media import audio_part, folder_media
from tests.audio_models import wav
from tests.engine.test_vision import chat, first_distribution, run_all, text, tokens

QUESTION = "What do you hear?"
TOKENS = 6


@pytest.fixture(scope="module")
def audio_engine(gemma3n_folder):
    engine = Engine(lambda: load_model(gemma3n_folder), config=EngineConfig(max_batch_size=8))
    engine.start()
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def builder(audio_engine) -> PromptBuilder:
    return PromptBuilder(audio_engine.loaded, name="tiny-gemma3n")


def clip(seed: int, *, frequency: float = 440.0, seconds: float = 0.5, rate: int = 16000) -> dict:
    data = wav(seconds, frequency=frequency, rate=rate, seed=seed)
    return audio_part(data, audio_format="wav", sha256=hashlib.sha256(data).hexdigest())


def test_gemma3n_takes_audio_only(gemma3n_folder):
    # Its images are not served: the tiny model's vision tower is zeros (audio_models.py).
    assert folder_media(gemma3n_folder) == ("audio",)


def test_a_clip_is_heard_and_the_same_clip_gives_the_same_logits(audio_engine, builder):
    one, other, again = run_all(
        audio_engine,
        builder,
        [chat(clip(1), text(QUESTION)), chat(clip(2, frequency=1500.0), text(QUESTION)),
         chat(clip(1), text(QUESTION))],
    )  # fmt: skip
    assert first_distribution(one) != first_distribution(other)
    assert first_distribution(one) == first_distribution(again)
    assert tokens(one) == tokens(again)


def mlx_vlm_greedy(model, processor, prompt: str, samples, count: int) -> list[int]:
    """Greedy tokens of mlx-vlm's own pieces (its processor, audio tower, language model and
    caches), run as the engine runs a prompt: all but its last token as embeddings, then
    the last as a step. Not its generate: in mlx-vlm 0.7.10 the KV-shared layers put their
    queries at the cache's offset after this call's tokens, so a prompt's logits depend on
    where its prefill is cut; and its get_input_embeddings leaves text unscaled, which is
    scaled here as transformers' Gemma 3n does (engine/media/model.py)."""
    import mlx.core as mx
    from mlx_vlm.utils import prepare_inputs

    inputs = prepare_inputs(processor, audio=[samples], prompts=[prompt])
    ids = inputs["input_ids"]
    features = model.get_input_embeddings(
        ids, None, input_features=inputs["input_features"],
        input_features_mask=inputs["input_features_mask"],
    )  # fmt: skip
    text = (ids < model.embed_vision.vocab_offset)[..., None]
    scale = model.config.text_config.hidden_size**0.5
    embeddings = mx.where(text, features.inputs_embeds * scale, features.inputs_embeds)
    cache = model.make_cache()
    model.language_model(ids[:, :-1], inputs_embeds=embeddings[:, :-1], cache=cache)
    logits = model.language_model(ids[:, -1:], cache=cache).logits
    out = []
    for _ in range(count):
        out.append(int(mx.argmax(logits[0, -1]).item()))
        logits = model.language_model(mx.array([[out[-1]]]), cache=cache).logits
    return out


def test_greedy_tokens_are_mlx_vlm_s(audio_engine, builder, gemma3n_folder):
    from mlx_vlm import load

    from inference.engine.media.audio import decode_audio

    model, processor = load(str(gemma3n_folder))
    template = [{"role": "user", "content": [{"type": "audio"}, text(QUESTION)]}]
    prompt = processor.tokenizer.apply_chat_template(
        template, add_generation_prompt=True, tokenize=False
    )
    # A clip at another rate, resampled to the feature extractor's 16 kHz on the way in.
    for seed, rate in ((3, 16000), (4, 44100)):
        part = clip(seed, rate=rate)
        samples = decode_audio(part["data"], rate=16000)
        expected = mlx_vlm_greedy(model, processor, prompt, samples, TOKENS)
        (served,) = run_all(audio_engine, builder, [chat(part, text(QUESTION), max_tokens=TOKENS)])
        assert tokens(served) == expected


def test_a_clip_row_and_a_text_row_share_a_batch_and_answer_as_alone(audio_engine, builder):
    audio_call, text_call = chat(clip(5), text(QUESTION)), chat(text("Say something."))
    (audio_alone,) = run_all(audio_engine, builder, [audio_call])
    (text_alone,) = run_all(audio_engine, builder, [text_call])
    audio_row, text_row = run_all(audio_engine, builder, [audio_call, text_call])
    assert tokens(audio_row) == tokens(audio_alone)
    assert tokens(text_row) == tokens(text_alone)
    assert audio_engine.unbatchable is None  # the rows did share one


def test_a_second_turn_about_the_same_clip_reuses_its_prefill(audio_engine, builder):
    heard = clip(6)
    (first,) = run_all(audio_engine, builder, [chat(heard, text(QUESTION))])
    history = [
        {"role": "user", "content": [heard, text(QUESTION)]},
        {"role": "assistant", "content": first.text},
    ]
    follow_up = text("And how loud is it?")
    (second,) = run_all(audio_engine, builder, [chat(follow_up, history=history)])
    assert second.end.cached_tokens >= first.end.prompt_tokens - 1
    other_history = [{**history[0], "content": [clip(7), text(QUESTION)]}, history[1]]
    (other,) = run_all(audio_engine, builder, [chat(follow_up, history=other_history)])
    # Another clip of the same length: cached up to its first placeholder, not through it.
    placeholder = builder.loaded.model.config.audio_token_id
    request = builder.build(chat(clip(7), text(QUESTION))).request
    assert other.end.cached_tokens <= request.prompt_tokens.index(placeholder)


def test_an_image_is_refused_and_bytes_that_are_no_audio_too(builder):
    image = {"type": "image", "mime": "image/png", "sha256": "0" * 64, "data": b"\x89PNG"}
    with pytest.raises(PromptRejected, match="does not accept image input"):
        builder.build(chat(image, text(QUESTION)))
    broken = audio_part(b"RIFF\0\0\0\0WAVEjunk", audio_format="wav", sha256="1" * 64)
    with pytest.raises(PromptRejected, match="cannot be decoded"):
        builder.build(chat(broken, text(QUESTION)))
