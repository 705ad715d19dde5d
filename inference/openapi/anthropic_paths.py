"""/v1/messages and /v1/messages/count_tokens (Anthropic Messages) as OpenAPI operations."""

from __future__ import annotations

from .common import (
    HLG,
    WARNING_HEADER,
    Schema,
    draft_fields,
    errors,
    integer,
    json_content,
    kv_fields,
    max_tokens_field,
    nullable,
    number,
    obj,
    ref,
    stop_list,
)
from .openai_requests import ANY_DESCRIPTION, media_limits
from .streams import ANTHROPIC_EVENTS, event_stream
from .usage import FILL

TEXT_BLOCK = obj({"type": {"const": "text"}, "text": {"type": "string"}}, ("type", "text"))
TEXT_OR_BLOCKS = {"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_BLOCK}]}

TOOL_RESULT = obj(
    {
        "type": {"const": "tool_result"},
        "tool_use_id": {"type": "string"},
        "content": nullable(TEXT_OR_BLOCKS),
    },
    ("type", "tool_use_id"),
)
THINKING = obj(
    {"type": {"const": "thinking"}, "thinking": {"type": "string"}}, ("type", "thinking")
)
REDACTED_THINKING = obj({"type": {"const": "redacted_thinking"}}, ("type",))
TOOL_USE = obj(
    {
        "type": {"const": "tool_use"},
        "id": {"type": "string"},
        "name": {"type": "string"},
        "input": {"type": "object"},
    },
    ("type", "id", "name", "input"),
)


IMAGE_BLOCK = obj(
    {
        "type": {"const": "image"},
        "source": {
            "anyOf": [
                obj(
                    {
                        "type": {"const": "base64"},
                        "media_type": {"enum": ["image/png", "image/jpeg", "image/webp"]},
                        "data": {"type": "string"},
                    },
                    ("type", "media_type", "data"),
                ),
                obj({"type": {"const": "url"}, "url": {"type": "string"}}, ("type", "url")),
            ],
            "description": "base64 data, or an http(s) URL the server fetches (the bounds: "
            "`messages`); a model that does not take images answers a 400.",
        },
    },
    ("type", "source"),
)


def _turn(role: str, *blocks: Schema) -> Schema:
    content = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": list(blocks)}}]}
    return obj({"role": {"const": role}, "content": content}, ("role", "content"))


MESSAGE = {
    "anyOf": [
        _turn("user", TEXT_BLOCK, IMAGE_BLOCK, TOOL_RESULT),
        _turn("assistant", TEXT_BLOCK, THINKING, REDACTED_THINKING, TOOL_USE),
    ]
}


def messages_request(limit: int, *, count_only: bool = False) -> Schema:
    properties: dict[str, Schema] = {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": MESSAGE,
            "description": media_limits(),
        },
        "system": nullable(TEXT_OR_BLOCKS),
        "tools": nullable(
            {
                "type": "array",
                "items": obj(
                    {
                        "type": {"description": "'custom' or absent; no other tool types"},
                        "name": {"type": "string"},
                        "description": ANY_DESCRIPTION,
                        "input_schema": {"type": "object"},
                    },
                    ("name", "input_schema"),
                ),
            }
        ),
        "tool_choice": nullable(
            {
                "anyOf": [
                    obj({"type": {"enum": ["auto", "any", "none"]}}, ("type",)),
                    obj({"type": {"const": "tool"}, "name": {"type": "string"}}, ("type", "name")),
                ]
            }
        ),
        "thinking": nullable(
            obj(
                {
                    "type": {"enum": ["enabled", "disabled", "adaptive"]},
                    "budget_tokens": {"type": "integer", "minimum": 1},
                },
                ("type",),
            )
        ),
        "output_config": nullable(
            obj(
                {
                    "format": nullable(
                        obj(
                            {"type": {"const": "json_schema"}, "schema": {"type": "object"}},
                            ("type", "schema"),
                        )
                    )
                }
            )
        ),
        "metadata": nullable(
            {
                "type": "object",
                "properties": {"user_id": {"type": ["string", "null"], "maxLength": 256}},
                "additionalProperties": False,
            }
        ),
    }
    required: tuple[str, ...] = ("model", "messages")
    if not count_only:
        properties.update(
            max_tokens={**max_tokens_field(limit), "type": "integer"},
            stop_sequences=nullable(stop_list()),
            stream={"type": ["boolean", "null"]},
            temperature=number(0),
            top_p=number(0, 1),
            top_k=integer(0),
            hlg=HLG,
            **kv_fields(),
            **draft_fields(),
        )
        required = ("model", "max_tokens", "messages")
    return obj(properties, required)


MESSAGE_RESPONSE = obj(
    {
        "id": {"type": "string"},
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "model": {"type": "string"},
        "content": {
            "type": "array",
            "items": obj({"type": {"enum": ["text", "thinking", "tool_use"]}}, ("type",)),
        },
        "stop_reason": {
            "type": ["string", "null"],
            "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", None],
        },
        "stop_sequence": {"type": ["string", "null"]},
        "usage": obj(
            {
                "input_tokens": {"type": "integer"},
                "output_tokens": {"type": "integer"},
                "fill": FILL,
            },
            ("input_tokens", "output_tokens"),
        ),
    },
    ("id", "type", "role", "model", "content", "stop_reason", "usage"),
)


def components(limit: int) -> dict[str, Schema]:
    return {
        "MessagesRequest": messages_request(limit),
        "CountTokensRequest": messages_request(limit, count_only=True),
        "Message": MESSAGE_RESPONSE,
        "TokenCount": obj({"input_tokens": {"type": "integer"}}, ("input_tokens",)),
    }


def paths(default_model: str) -> dict[str, Schema]:
    conversation = [{"role": "user", "content": "Hi"}]
    tags = ["anthropic"]
    return {
        "/v1/messages": {
            "post": {
                "operationId": "messages_create",
                "summary": "Create a message (Anthropic Messages)",
                "tags": tags,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": ref("MessagesRequest"),
                            "example": {
                                "model": default_model,
                                "max_tokens": 1,
                                "messages": conversation,
                            },
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The message; with `stream: true`, its named events.",
                        "headers": WARNING_HEADER,
                        "content": {
                            **json_content(ref("Message")),
                            **event_stream(names=ANTHROPIC_EVENTS, payload="MessageStreamEvent"),
                        },
                    },
                    **errors("AnthropicError", 400, 404, 500, 502),
                },
            }
        },
        "/v1/messages/count_tokens": {
            "post": {
                "operationId": "messages_count_tokens",
                "summary": "Count a request's input tokens (Anthropic Messages)",
                "tags": tags,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": ref("CountTokensRequest"),
                            "example": {"model": default_model, "messages": conversation},
                        }
                    },
                },
                "responses": {
                    "200": {"description": "The count", "content": json_content(ref("TokenCount"))},
                    **errors("AnthropicError", 400, 404, 502),
                },
            }
        },
    }
