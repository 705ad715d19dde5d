"""Vision-language models served by the engine through mlx-vlm, one of each family it
serves (tiny random-weight ones: a Qwen2.5-VL, mRoPE; a SmolVLM, Idefics3, plain RoPE and
tiled images): images in the prompt, rows batched with text rows, the prompt cache keyed by
the images' content, and the tokens mlx-vlm's own generate gives."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from inference.engine import Engine, EngineConfig, load_model
from inference.engine.prompting.prompt import PromptBuilder, PromptRejected
from inference.protocol.media import config_media, folder_media, image_part, mlx_vlm_media
from inference.protocol.sampling import SamplingParams
from inference.protocol.wire import ChatInput, GenerateCall
from tests.engine.helpers import Run
from tests.vision_models import png

QUESTION = "What is in this picture?"
TOKENS = 8
# Each family the engine serves: the fixture that builds its tiny model, and two sizes of
# picture. SmolVLM's processor scales every image up to 2048 pixels, in 512-pixel tiles
# and a global one: a wide or tall picture keeps it to five tiles (320 placeholders).
FAMILIES = {
    "qwen2_5_vl": ("vision_folder", ((112, 84), (56, 140))),
    "idefics3": ("smolvlm_folder", ((112, 28), (24, 96))),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def family_folder(request, family) -> Path:
    return request.getfixturevalue(FAMILIES[family][0])


@pytest.fixture(scope="module")
def sizes(family) -> tuple[tuple[int, int], ...]:
    return FAMILIES[family][1]


@pytest.fixture(scope="module")
def picture(sizes):
    """An image part of random colours, of the family's first size unless given one."""

    def make(seed: int, size: tuple[int, int] | None = None) -> dict:
        data = png(*(size or sizes[0]), seed)
        return image_part(data, mime="image/png", sha256=hashlib.sha256(data).hexdigest())

    return make


@pytest.fixture(scope="module")
def vision_engine(family_folder):
    engine = Engine(lambda: load_model(family_folder), config=EngineConfig(max_batch_size=8))
    engine.start()
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def builder(vision_engine) -> PromptBuilder:
    return PromptBuilder(vision_engine.loaded, name="tiny-vl")


def chat(*content, max_tokens: int = TOKENS, history=()) -> GenerateCall:
    messages = [*history, {"role": "user", "content": list(content)}]
    return GenerateCall(
        chat=ChatInput(messages=messages),
        sampling=SamplingParams(temperature=0.0),
        max_tokens=max_tokens,
        logprobs=True,
        top_logprobs=5,
    )


def text(words: str) -> dict:
    return {"type": "text", "text": words}


def run_all(engine: Engine, builder: PromptBuilder, calls: list[GenerateCall]) -> list[Run]:
    """Submitted together, so that they are admitted (and prefilled) as one batch."""
    runs = [Run() for _ in calls]
    submitted = [
        (builder.build(call).request, run.emit) for call, run in zip(calls, runs, strict=True)
    ]
    for run, request_id in zip(runs, engine.submit_many(submitted), strict=True):
        run.request_id = request_id
    return [run.wait() for run in runs]


def tokens(run: Run) -> list[int]:
    return [logprob.token_id for delta in run.deltas for logprob in delta.logprobs]


def first_distribution(run: Run) -> list[tuple[str, float]]:
    first = run.deltas[0].logprobs[0]
    return [(top.token, top.logprob) for top in first.top]


def test_an_image_is_seen_and_the_same_image_gives_the_same_logits(vision_engine, builder, picture):
    one, other, again = run_all(
        vision_engine,
        builder,
        [chat(picture(1), text(QUESTION)), chat(picture(2), text(QUESTION)),
         chat(picture(1), text(QUESTION))],
    )  # fmt: skip
    assert first_distribution(one) != first_distribution(other)
    assert first_distribution(one) == first_distribution(again)
    assert tokens(one) == tokens(again) != tokens(other)


def test_greedy_tokens_are_mlx_vlm_generate_s(
    vision_engine, builder, family_folder, picture, sizes
):
    from mlx_vlm import load
    from mlx_vlm.generate import generate
    from mlx_vlm.utils import load_image

    model, processor = load(str(family_folder))
    template = [{"role": "user", "content": [{"type": "image"}, text(QUESTION)]}]
    prompt = processor.tokenizer.apply_chat_template(
        template, add_generation_prompt=True, tokenize=False
    )
    for seed, size in zip((3, 4), sizes, strict=True):
        image = load_image(io.BytesIO(png(*size, seed)))
        expected = generate(
            model, processor, prompt, image=[image], max_tokens=TOKENS, temperature=0.0
        ).token_ids
        (served,) = run_all(vision_engine, builder, [chat(picture(seed, size), text(QUESTION))])
        assert tokens(served) == list(expected)


def test_an_image_row_and_a_text_row_share_a_batch_and_answer_as_alone(
    vision_engine, builder, picture
):
    image_call, text_call = chat(picture(5), text(QUESTION)), chat(text("Say something."))
    (image_alone,) = run_all(vision_engine, builder, [image_call])
    (text_alone,) = run_all(vision_engine, builder, [text_call])
    image_row, text_row = run_all(vision_engine, builder, [image_call, text_call])
    assert tokens(image_row) == tokens(image_alone)
    assert tokens(text_row) == tokens(text_alone)
    assert vision_engine.unbatchable is None  # the rows did share one


def test_a_second_turn_about_the_same_image_reuses_its_prefill(vision_engine, builder, picture):
    image = picture(6)
    (first,) = run_all(vision_engine, builder, [chat(image, text(QUESTION))])
    history = [
        {"role": "user", "content": [image, text(QUESTION)]},
        {"role": "assistant", "content": first.text},
    ]
    follow_up = text("And what colour is it?")
    (second,) = run_all(vision_engine, builder, [chat(follow_up, history=history)])
    # The first turn's prompt, its image's placeholders among them, came from the cache.
    assert second.end.cached_tokens >= first.end.prompt_tokens - 1
    (other,) = run_all(
        vision_engine,
        builder,
        [chat(follow_up, history=[{**history[0], "content": [picture(7), text(QUESTION)]},
                                  history[1]])],
    )  # fmt: skip
    # Another picture of the same size: cached up to its first placeholder, not through it.
    placeholder = builder.loaded.model.config.image_token_id
    request = builder.build(chat(picture(7), text(QUESTION))).request
    assert other.end.cached_tokens <= request.prompt_tokens.index(placeholder)


def test_a_text_only_request_to_a_vision_model_takes_the_ordinary_path(vision_engine, builder):
    request = builder.build(chat(text("Hello there."))).request
    assert request.media is None
    # SmolVLM's template reads contents only as lists of parts: a string is made one.
    plain = [{"role": "user", "content": "Hello there."}]
    assert "Hello there." in builder.render(plain)
    assert builder.render(plain) == builder.render(
        [{"role": "user", "content": [text("Hello there.")]}]
    )
    (run,) = run_all(vision_engine, builder, [chat(text("Hello there."))])
    assert run.end.completion_tokens == TOKENS


def test_audio_is_refused_by_a_vision_model(builder):
    audio = {"type": "audio", "format": "wav", "sha256": "0" * 64, "data": b"RIFF"}
    with pytest.raises(PromptRejected, match="does not accept audio input"):
        builder.build(chat(audio, text(QUESTION)))


def test_which_models_take_images_is_read_from_the_config(
    vision_folder, smolvlm_folder, model_folder
):
    assert folder_media(vision_folder) == folder_media(smolvlm_folder) == ("vision",)
    assert folder_media(model_folder) == ()  # the default model: text only
    qwen = {"model_type": "qwen2_5_vl", "vision_config": {"depth": 2}}
    # Of a family, the media the engine serves: Qwen2.5-VL's images, not an audio tower's.
    assert config_media({**qwen, "audio_config": {"d_model": 8}}) == ("vision",)
    assert config_media({"model_type": "qwen2_5_vl"}) == ()  # no tower, no images
    # mlx-vlm serves Gemma 3's images too; the engine does not yet (its own masks).
    gemma = {"model_type": "gemma3", "vision_config": {"hidden_size": 8}}
    assert mlx_vlm_media(gemma) == ("vision",) and config_media(gemma) == ()
