"""An image row against a text row on one vision-language model, and image prefill against
mlx-vlm's own `generate`, on this CPU.

    .venv/bin/python bench/vision.py [--tokens 129] [--runs 3]

The model is a random-weight Qwen2.5-VL (tests/vision_models.py) of a small but not tiny
shape: a language model 512 wide and 6 layers deep, a vision tower 256 wide and 4 deep,
its processor the real one; the image 448x448 (256 placeholders). In the engine, as a model
worker runs it (the optimized BLAS under MLX): one row at a time, the prompt cache off, so
each image is prefilled and run through the vision tower again. Decode tok/s is measured
from the first token to the last; first token from submission, the vision tower included.
mlx-vlm's `stream_generate` gets the same image and prompt. Each figure is the best of
`--runs`. Writes var/bench/vision.json.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# As a model worker starts: the optimized BLAS under MLX before mlx.core is imported.
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()

OUT = ROOT / "var" / "bench" / "vision.json"
TEXT = {
    "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 6,
    "num_attention_heads": 8, "num_key_value_heads": 2,
    "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
}  # fmt: skip
VISION = {
    "depth": 4, "hidden_size": 256, "intermediate_size": 512, "num_heads": 4,
    "out_hidden_size": 512, "fullatt_block_indexes": [3],
}  # fmt: skip
SIDE = 448
QUESTION = "Describe this picture in detail."


def engine_runs(folder: Path, tokens: int, runs: int) -> dict:
    from inference.engine import Engine, EngineConfig, load_model
    from inference.engine.caching.prompt_cache import PromptCacheConfig
    from inference.engine.prompting.prompt import PromptBuilder
    from inference.protocol.media import image_part
    from inference.protocol.sampling import SamplingParams
    from inference.protocol.wire import ChatInput, GenerateCall
    from tests.engine.helpers import Run
    from tests.vision_models import png

    config = EngineConfig(max_batch_size=8, prompt_cache=PromptCacheConfig(max_entries=0))
    engine = Engine(lambda: load_model(folder), config=config).start()
    builder = PromptBuilder(engine.loaded, name=folder.name)

    def once(seed: int | None, count: int) -> tuple[float, float]:
        content = [{"type": "text", "text": QUESTION}]
        if seed is not None:
            data = png(SIDE, SIDE, seed)
            digest = hashlib.sha256(data).hexdigest()
            content.insert(0, image_part(data, mime="image/png", sha256=digest))
        call = GenerateCall(
            chat=ChatInput(messages=[{"role": "user", "content": content}]),
            sampling=SamplingParams(temperature=0.0),
            max_tokens=count,
        )
        request = builder.build(call).request
        run, times = Run(), []

        def emit(event) -> None:
            times.append(time.perf_counter())
            run.emit(event)

        started = time.perf_counter()
        engine.submit(request, emit)
        run.wait()
        # The last event is Finished; the deltas before it are the tokens, one each.
        return times[0] - started, (count - 1) / (times[-2] - times[0])

    try:
        once(0, 4), once(None, 4)  # warm-up
        text = [once(None, tokens) for _ in range(runs)]
        image = [once(seed, tokens) for seed in range(1, runs + 1)]
    finally:
        engine.shutdown()
    return {
        "text_decode_tps": max(tps for _, tps in text),
        "image_decode_tps": max(tps for _, tps in image),
        "image_first_token_s": min(first for first, _ in image),
    }


def mlx_vlm_runs(folder: Path, tokens: int, runs: int) -> dict:
    from mlx_vlm import load
    from mlx_vlm.generate import stream_generate
    from mlx_vlm.utils import load_image

    from tests.vision_models import png

    model, processor = load(str(folder))
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
    ]
    prompt = processor.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    firsts, rates = [], []
    for seed in range(runs + 1):
        image = load_image(io.BytesIO(png(SIDE, SIDE, seed)))
        started, times = time.perf_counter(), []
        for _ in stream_generate(
            model, processor, prompt, image=[image], max_tokens=tokens, temperature=0.0
        ):
            times.append(time.perf_counter())
        if seed:  # the first is a warm-up
            firsts.append(times[0] - started)
            rates.append((len(times) - 1) / (times[-1] - times[0]))
    return {"image_decode_tps": max(rates), "image_first_token_s": min(firsts)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=129)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from tests.vision_models import build_qwen2_5_vl_folder

    with tempfile.TemporaryDirectory() as scratch:
        folder = build_qwen2_5_vl_folder(Path(scratch) / "qwen2-5-vl", text=TEXT, vision=VISION)
        ours = engine_runs(folder, args.tokens, args.runs)
        theirs = mlx_vlm_runs(folder, args.tokens, args.runs)
    report = {"tokens": args.tokens, "runs": args.runs, "mlxlab": ours, "mlx_vlm": theirs}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    ratio = ours["image_decode_tps"] / ours["text_decode_tps"]
    print(f"decode tok/s, text row  {ours['text_decode_tps']:8.1f}")
    print(f"decode tok/s, image row {ours['image_decode_tps']:8.1f}  ({ratio:.2f}x the text row)")
    print(f"decode tok/s, mlx-vlm   {theirs['image_decode_tps']:8.1f}")
    print(
        f"first token, image row  {ours['image_first_token_s']:8.3f} s  "
        f"(mlx-vlm generate {theirs['image_first_token_s']:.3f} s)"
    )
    print(f"results in {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
