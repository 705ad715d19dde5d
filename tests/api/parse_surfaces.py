"""Each generation surface's own parser, from a body's extra fields to its call: for tests
that a field is read alike on every surface (and refused alike)."""

from __future__ import annotations

from inference.api.anthropic_request import parse_messages_request
from inference.api.openai_request import parse_chat_completion, parse_completion
from inference.api.responses_request import parse_responses_call, responses_chat_call

HI = [{"role": "user", "content": "Hi"}]
SURFACES = {
    "chat": lambda body: parse_chat_completion({"messages": HI, **body}),
    "completions": lambda body: parse_completion({"prompt": "Hi", **body}),
    "messages": lambda body: parse_messages_request(
        {"model": "m", "max_tokens": 5, "messages": HI, **body}
    ),
    "responses": lambda body: responses_chat_call(
        parse_responses_call({"input": "Hi", **body}), []
    ),
}
