"""Embeddings per second on this CPU: 256 short texts through the engine's Embedder (what an
embedding worker runs), batched by length against one text a forward pass, and against
mlx-embeddings' own model called one text at a time; sentence-transformers on the same
weights where it is installed.

    .venv/bin/python bench/embeddings.py [--texts 256] [--runs 1]

The model is all-MiniLM-L6-v2's shape (BERT, 6 layers, width 384, vocabulary 30,522) with
random weights, in a folder as mlx-embeddings saves one, run as an embedding worker runs it
(the optimized BLAS under MLX: cpu_fast_path.py); the texts are 8 to 40 token ids
(a sentence or two), the same for every row. Each figure is the best of `--runs` passes
over all the texts, after a short warm-up. Writes var/bench/embeddings.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# As a model worker starts: the optimized BLAS under MLX before mlx.core is imported.
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

OUT = ROOT / "var" / "bench" / "embeddings.json"
BATCH_TOKENS = 16384  # MLXLAB_EMBEDDING_BATCH_TOKENS's default

MINILM = {
    "architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384,
    "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
    "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2,
    "vocab_size": 30522, "layer_norm_eps": 1e-12, "pad_token_id": 0,
    "attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1,
}  # fmt: skip


def build_folder(folder: Path) -> Path:
    from mlx_embeddings.models import bert

    from tests.embedding_models import write_wordpiece_tokenizer

    mx.random.seed(0)
    model = bert.Model(bert.ModelArgs.from_dict(MINILM))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(MINILM))
    write_wordpiece_tokenizer(folder, MINILM["max_position_embeddings"])
    return folder


def texts(count: int) -> list[list[int]]:
    """[CLS] ids [SEP], 8 to 40 tokens each."""
    rng = random.Random(0)
    return [
        [2, *(rng.randrange(100, 30000) for _ in range(rng.randint(6, 38))), 3]
        for _ in range(count)
    ]


def best_rate(run, count: int, runs: int) -> float:
    best = min(timed(run) for _ in range(runs))
    return count / best


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def engine_rows(folder: Path, inputs: list[list[int]], runs: int) -> dict[str, float]:
    from inference.engine.embedding.embedder import Embedder
    from inference.engine.embedding.models import load_embedding_model
    from inference.protocol.embedding_folder import embedding_support

    model = load_embedding_model(folder, embedding_support(folder).spec)
    embedder = Embedder(model, name="minilm", batch_tokens=BATCH_TOKENS)
    embedder.vectors(inputs[:8])  # warm-up: the first pass allocates
    batched = best_rate(lambda: embedder.vectors(inputs), len(inputs), runs)
    alone = best_rate(lambda: [embedder.vectors([x]) for x in inputs], len(inputs), runs)

    def library_alone() -> None:
        for ids in inputs:
            row = mx.array([ids])
            mx.eval(model.model(row, attention_mask=mx.ones(row.shape)).text_embeds)

    library = best_rate(library_alone, len(inputs), runs)
    return {
        "engine, batched": batched,
        "engine, one a pass": alone,
        "mlx-embeddings, one a call": library,
    }


def sentence_transformers_row(folder: Path, count: int, runs: int) -> float | str:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return (
            "not installed: it needs PyTorch, whose CPU wheels come from download.pytorch.org "
            "(not reachable here); PyPI's Linux wheel brings ~3 GB of CUDA libraries"
        )
    model = SentenceTransformer(str(folder), device="cpu")
    sentences = [" ".join(["the cat sat on the mat"] * 2)] * count
    return best_rate(lambda: model.encode(sentences, batch_size=32), count, runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    inputs = texts(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp))
        rows: dict[str, float | str] = engine_rows(folder, inputs, args.runs)
        rows["sentence-transformers"] = sentence_transformers_row(folder, args.texts, args.runs)
    print(f"{args.texts} texts of 8-40 tokens, all-MiniLM-L6-v2's shape (random weights)")
    for name, value in rows.items():
        figure = f"{value:8.1f} texts/s" if isinstance(value, float) else value
        print(f"  {name:28} {figure}")
    batched, alone = rows["engine, batched"], rows["engine, one a pass"]
    print(f"  batched / one a pass: {batched / alone:.1f}x")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"texts": args.texts, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
