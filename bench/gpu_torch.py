"""PyTorch + transformers on the same shape: `generate` with a static KV cache.

The reference for one-stream decode: on a GPU, transformers compiles the decode step
of a static cache, which is the usual way to run it fast there.
"""

from __future__ import annotations

import time


def torch_rows(shape, tokens: int, batches: list[int]) -> dict:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        return {"torch_skipped": f"transformers is not installed: {exc}"}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = {k: v for k, v in shape.config().items() if k != "quantization"}
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16).to(device).eval()
    rows = {"torch_device": device}
    one = _generate_seconds(torch, model, 1, 1, shape.vocab, device)
    full = _generate_seconds(torch, model, 1, tokens, shape.vocab, device)
    rows["torch_stream_tps"] = round((tokens - 1) / max(full - one, 1e-9), 1)
    for batch in batches:
        seconds = _generate_seconds(torch, model, batch, tokens, shape.vocab, device)
        rows[f"torch_batch{batch}_tps"] = round(batch * tokens / seconds, 1)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _generate_seconds(torch, model, batch: int, tokens: int, vocab: int, device: str) -> float:
    """Seconds of the faster of two runs (the first compiles), prefill of 32 tokens included."""
    ids = torch.randint(3, vocab, (batch, 32), device=device)
    best = float("inf")
    for _ in range(2):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                cache_implementation="static",
                pad_token_id=0,
            )
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return best
