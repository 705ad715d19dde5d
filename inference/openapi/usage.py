"""What an answer reports of its tokens, in the OpenAPI schema: usage (cached, resumed,
drafted and filled tokens) and why a choice finished, shared by the OpenAI surfaces and,
for fill, the Anthropic and Responses ones."""

from __future__ import annotations

from .common import obj

RESUMED_FROM = {
    "type": "integer",
    "description": (
        "Present when this answer resumed an interrupted generation (an identical retry): "
        "the completion tokens replayed from its checkpoint, as the X-Resumed-From header says."
    ),
}

FILL = obj(
    {
        "mode": {"type": "string", "enum": ["strict", "echo"]},
        "filled_tokens": {"type": "integer"},
        "proposed_tokens": {"type": "integer"},
        "parse_fallback": {"type": "boolean"},
        "refused": {
            "type": "string",
            "enum": ["logprobs", "grammar", "draft", "media", "template", "model"],
        },
    },
    ("mode", "filled_tokens", "proposed_tokens", "parse_fallback"),
    description=(
        "Tool-call fast-forwarding (MLXLAB_FILL), present when it is on and the request "
        "offers tools: the completion's tokens it drafted and the model kept, all it "
        "drafted, whether a tool call that did not parse turned it off, or why it did not fill."
    ),
)

USAGE = obj(
    {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
        "prompt_tokens_details": obj({"cached_tokens": {"type": "integer"}}),
        "resumed_from": RESUMED_FROM,
        "fill": FILL,
        "completion_tokens_details": obj(
            {
                "accepted_prediction_tokens": {"type": "integer"},
                "rejected_prediction_tokens": {"type": "integer"},
                "fast_forwarded_tokens": {"type": "integer"},
            }
        ),
    },
    ("prompt_tokens", "completion_tokens", "total_tokens"),
)

FINISH_REASON = {"type": "string", "enum": ["stop", "length", "tool_calls"]}
