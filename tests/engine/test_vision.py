"""Vision-language models served by the engine through mlx-vlm, one of each family it
serves (tiny random-weight ones: a Qwen2.5-VL, mRoPE; a SmolVLM, Idefics3, plain RoPE and
tiled images; a SmolVLM2, Idefics3's model behind its own processor; a Gemma 3, sliding
windows; a Qwen3-VL, mRoPE and deepstack features):
images in the prompt, rows batched with text rows, the prompt cache keyed by the images'
content, and the tokens mlx-vlm's own generate gives."""

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
GREEDY_TOKENS = 16  # compared with mlx-vlm's generate
# Each family the engine serves: the fixture that builds its tiny model, and two sizes of
# picture. SmolVLM's processor (SmolVLM2's too) scales every image up to 2048 pixels, in
# 512-pixel tiles and a global one: a wide or tall picture keeps it to five tiles (320
# placeholders).
# Gemma 3's resizes every image to its square (the tiny model's: 112 pixels, 16 soft tokens);
# Qwen3-VL's scales a small one up to 65,536 pixels (a 112x84 picture: 70 placeholders).
FAMILIES = {
    "qwen2_5_vl": ("vision_folder", ((112, 84), (56, 140))),
    "idefics3": ("smolvlm_folder", ((112, 28), (24, 96))),
    "smolvlm": ("smolvlm2_folder", ((112, 28), (24, 96))),
    "gemma3": ("gemma3_folder", ((112, 84), (56, 140))),
    "qwen3_vl": ("qwen3_vl_folder", ((112, 84), (56, 140))),
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


def image_token(config) -> int:
    """The image placeholder's id (Gemma 3's config names it image_token_index)."""
    token = getattr(config, "image_token_id", None)
    return config.image_token_index if token is None else token


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


def mlx_vlm_inputs(processor, prompt: str, images: list, tokens: list[int]) -> dict:
    """mlx-vlm's model inputs of a rendered prompt (its processor's pixels, grids...) with the
    engine's tokens, which are its processor's but for a <bos> the template already has
    (Gemma 3's: test_a_prompt_has_the_template_s_markers_alone)."""
    import mlx.core as mx
    from mlx_vlm.utils import prepare_inputs

    inputs = prepare_inputs(processor, images=images, prompts=[prompt], add_special_tokens=False)
    own = inputs.pop("input_ids")[0].tolist()
    doubled = own[:1] * (own[:2] == [own[0]] * 2)
    assert own == doubled + tokens
    inputs["input_ids"], inputs["mask"] = mx.array([tokens]), mx.ones((1, len(tokens)), mx.int32)
    del inputs["attention_mask"]
    return inputs


def test_greedy_tokens_are_mlx_vlm_generate_s(
    vision_engine, builder, family, family_folder, picture, sizes
):
    from mlx_vlm import load
    from mlx_vlm.generate import generate
    from mlx_vlm.utils import load_image

    model, processor = load(str(family_folder))
    if family == "gemma3":  # its images at transformers' scale, as the engine puts them
        model.config.hidden_size = model.config.text_config.hidden_size
    template = [{"role": "user", "content": [{"type": "image"}, text(QUESTION)]}]
    prompt = processor.tokenizer.apply_chat_template(
        template, add_generation_prompt=True, tokenize=False
    )
    for seed, size in zip((3, 4), sizes, strict=True):
        call = chat(picture(seed, size), text(QUESTION), max_tokens=GREEDY_TOKENS)
        image = load_image(io.BytesIO(png(*size, seed)))
        inputs = mlx_vlm_inputs(
            processor, prompt, [image], builder.build(call).request.prompt_tokens
        )
        expected = generate(
            model, processor, prompt, **inputs, max_tokens=GREEDY_TOKENS, temperature=0.0
        ).token_ids
        (served,) = run_all(vision_engine, builder, [call])
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


def test_an_image_prefilled_in_pieces_answers_as_in_one(
    vision_engine, builder, family_folder, picture
):
    """16 tokens a chunk: the image's placeholders (Qwen3-VL's deepstack features with them;
    Gemma 3's sliding windows past them) cut across chunks give the tokens of one chunk."""
    call = chat(picture(8), text(QUESTION))
    (whole,) = run_all(vision_engine, builder, [call])
    config = EngineConfig(max_batch_size=8, prefill_step_size=16)
    engine = Engine(lambda: load_model(family_folder), config=config)
    engine.start()
    try:
        (pieces,) = run_all(engine, PromptBuilder(engine.loaded, name="tiny-vl"), [call])
    finally:
        engine.shutdown()
    prompt = builder.build(call).request.prompt_tokens
    placeholder = image_token(builder.loaded.model.config)
    first, last = prompt.index(placeholder), len(prompt) - 1 - prompt[::-1].index(placeholder)
    assert first // 16 != last // 16  # a chunk ends inside the image
    assert tokens(pieces) == tokens(whole)


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
    placeholder = image_token(builder.loaded.model.config)
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


def test_a_prompt_has_the_template_s_markers_alone(gemma3_folder):
    """Gemma 3's template renders its <bos>, and its tokenizer adds one to a text encoded
    with special tokens: a media prompt has the template's alone, as a text prompt has.
    mlx-vlm 0.7.10's prepare_inputs passes `add_special_tokens` only to a processor whose
    call names it, which Gemma 3's does not: its tokenizer adds a second <bos>, whatever
    prepare_inputs (or generate) is asked."""
    from mlx_vlm import load
    from mlx_vlm.utils import load_image, prepare_inputs

    loaded = load_model(gemma3_folder)
    builder = PromptBuilder(loaded, name="tiny-gemma3")
    start = loaded.tokenizer.convert_tokens_to_ids(["<bos>", "<start_of_turn>"])
    data = png(56, 56, 1)
    image_call = chat(image_part(data, mime="image/png", sha256="0" * 64), text(QUESTION))
    image_prompt = builder.build(image_call).request.prompt_tokens
    assert image_prompt[:2] == builder.build(chat(text(QUESTION))).request.prompt_tokens[:2]
    assert image_prompt[:2] == start
    _, processor = load(str(gemma3_folder))
    rendered = builder.render(image_call.chat.messages)
    own = prepare_inputs(
        processor, images=[load_image(io.BytesIO(data))], prompts=[rendered],
        add_special_tokens=False,
    )["input_ids"][0].tolist()  # fmt: skip
    assert own[:3] == [start[0], *start] and own[1:] == image_prompt


def test_gemma3_images_enter_as_the_projector_gives_them(gemma3_folder):
    """transformers' Gemma 3 puts its projector's output in the residual stream as it is:
    the embeddings the engine passes, which the language model multiplies by the square
    root of its width, hold it divided by that. mlx-vlm 0.7.10 divides by the square root
    of its config's top-level hidden_size instead, which a published config lacks (2048)."""
    import mlx.core as mx
    from mlx_vlm import load
    from mlx_vlm.utils import load_image, prepare_inputs

    from inference.engine.media.model import VisionLanguageModel

    vlm, processor = load(str(gemma3_folder))
    image = load_image(io.BytesIO(png(56, 56, 2)))
    prompt = "<start_of_turn>user\n<start_of_image>What?<end_of_turn>\n"
    inputs = prepare_inputs(processor, images=[image], prompts=[prompt])
    ids, pixels = inputs["input_ids"], inputs["pixel_values"]
    positions = ids[0].tolist()
    soft = mx.array(
        [i for i, token in enumerate(positions) if token == vlm.config.image_token_index]
    )
    text_positions = mx.array([i for i in range(len(positions)) if i not in soft.tolist()])
    hidden, _, _ = vlm.vision_tower(pixels.transpose(0, 2, 3, 1), output_hidden_states=True)
    projected = vlm.multi_modal_projector(hidden)[0]
    width = vlm.config.text_config.hidden_size
    assert vlm.config.hidden_size != width  # mlx-vlm's default, 2048
    theirs = vlm.get_input_embeddings(ids, pixels, mask=mx.ones(ids.shape)).inputs_embeds[0]
    assert not mx.allclose(theirs[soft] * width**0.5, projected, atol=1e-4)
    ours = VisionLanguageModel(vlm).prompt_embeddings(ids, pixels).inputs_embeds[0]
    assert mx.allclose(ours[soft] * width**0.5, projected, atol=1e-4)
    assert mx.array_equal(ours[text_positions], theirs[text_positions])  # the text's


def test_which_models_take_images_is_read_from_the_config(
    vision_folder, smolvlm_folder, smolvlm2_folder, gemma3_folder, qwen3_vl_folder, model_folder
):
    assert folder_media(vision_folder) == folder_media(smolvlm_folder) == ("vision",)
    assert folder_media(smolvlm2_folder) == ("vision",)
    assert folder_media(gemma3_folder) == folder_media(qwen3_vl_folder) == ("vision",)
    assert folder_media(model_folder) == ()  # the default model: text only
    qwen = {"model_type": "qwen2_5_vl", "vision_config": {"depth": 2}}
    # Of a family, the media the engine serves: Qwen2.5-VL's images, not an audio tower's.
    assert config_media({**qwen, "audio_config": {"d_model": 8}}) == ("vision",)
    assert config_media({"model_type": "qwen2_5_vl"}) == ()  # no tower, no images
    # mlx-vlm serves PaliGemma's images too; the engine does not (its prefix's own masks).
    paligemma = {"model_type": "paligemma", "vision_config": {"hidden_size": 8}}
    assert mlx_vlm_media(paligemma) == ("vision",) and config_media(paligemma) == ()
