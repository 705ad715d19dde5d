"""The prompt cache and the CPU fast path as a client sees them: usage and /stats."""

from __future__ import annotations

import uuid


def _system() -> dict:
    return {"role": "system", "content": f"Conversation {uuid.uuid4().hex[:8]}. Be brief."}


def test_the_second_turn_of_a_conversation_reports_cached_tokens(client, model):
    messages = [_system(), {"role": "user", "content": "Name a fruit."}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    # Only the template's `<|im_start|>system\n` header can be shared with earlier requests.
    assert first.usage.prompt_tokens_details.cached_tokens <= 3
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And a vegetable?"},
    ]
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = list(stream)[-1].usage
    assert usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens


def test_stats_show_the_path_the_memory_and_the_prompt_cache(client, http, model, staff_http):
    before = staff_http.get("/stats").json()["models"][model]["prompt_cache"]
    prompt = f"Request {uuid.uuid4().hex[:8]}: count to three."
    for _ in range(2):
        client.completions.create(model=model, prompt=prompt, max_tokens=2)
    stats = staff_http.get("/stats").json()
    entry = stats["models"][model]
    # The quantized kernel (make setup builds it): weights stay quantized, none dense.
    assert entry["fast_path"]["path"] == "kernel", entry["fast_path"]["reason"]
    assert entry["fast_path"]["layers_on_kernel"] == 211 and entry["fast_path"]["kernel"]
    assert entry["fast_path"]["dense_weight_bytes"] == 0
    # Its decode steps as two native calls a layer (the AVX2 build, as make setup makes it).
    assert entry["fast_path"]["layers_fused"] == 30, entry["fast_path"]["reason"]
    # Llama's own shape: nothing added to describe, no block left unfused.
    assert entry["fast_path"]["fused_shape"] == [] and entry["fast_path"]["not_fused"] is None
    assert entry["device"] == "cpu" and entry["warm_up_seconds"] == 0  # warm-up: GPUs only
    assert stats["blas"]["loaded"] and stats["blas"]["path"] == entry["fast_path"]["blas"]
    cache = entry["prompt_cache"]
    assert cache["enabled"] and cache["entries"] >= 1 and cache["bytes"] > 0
    assert cache["lookups"] == before["lookups"] + 2 and cache["hits"] >= before["hits"] + 1
    models = stats["models"].values()  # other tests may have loaded more models
    memory = stats["memory"]
    assert memory["dense_weight_bytes"] == sum(m["fast_path"]["dense_weight_bytes"] for m in models)
    assert memory["prompt_cache_bytes"] == sum(m["prompt_cache"]["bytes"] for m in models)


def test_a_named_session_keeps_its_last_turn_and_serves_the_next(client, http, model, staff_http):
    """prompt_cache_key (OpenAI) and session_id (mlx-bun) name one session each."""
    before = staff_http.get("/stats").json()["models"][model]["prompt_cache"]["sessions"]
    session = f"agent-{uuid.uuid4().hex[:8]}"
    messages = [_system(), {"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, extra_body={"session_id": session}
    )
    assert (
        staff_http.get("/stats").json()["models"][model]["prompt_cache"]["sessions"] == before + 1
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And another?"},
    ]
    second = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, extra_body={"prompt_cache_key": session}
    )
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    # The second turn replaced the first: still one entry for the session.
    assert (
        staff_http.get("/stats").json()["models"][model]["prompt_cache"]["sessions"] == before + 1
    )


def test_a_session_name_must_be_a_short_string(http, model):
    for name, value in (("session_id", 5), ("prompt_cache_key", ""), ("session_id", "x" * 257)):
        body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], name: value}
        response = http.post("/v1/chat/completions", json=body)
        assert response.status_code == 400
        assert response.json()["error"] == {
            "message": f"{name} must be a string of 1 to 256 characters",
            "type": "invalid_request_error",
            "param": name,
            "code": None,
        }
