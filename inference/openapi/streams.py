"""Server-sent events of the streaming operations, one schema per event.

Before OpenAPI 3.2 (and its `itemSchema`), the `schema` of a text/event-stream
describes each event: `{event, data, id}` with `data` a string. Its JSON
payload is described by `contentSchema`, which tools treat as an annotation;
tests/access/test_openapi.py validates the payloads against it.
"""

from __future__ import annotations

from .common import Schema, nullable, obj, ref
from .usage import FINISH_REASON, USAGE

ANTHROPIC_EVENTS = [
    "message_start",
    "ping",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
]
RESPONSES_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.content_part.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
]


def _json_data(schema_name: str) -> Schema:
    return {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": ref(schema_name),
    }


def event_stream(*, names: list[str] | None, payload: str) -> Schema:
    """A text/event-stream media type: named events (Anthropic, Responses), or OpenAI's
    unnamed `data:` frames ending in `[DONE]`."""
    if names is None:
        event: Schema = {"const": "message", "description": "no event name is sent"}
        data = {"anyOf": [_json_data(payload), {"const": "[DONE]"}]}
    else:
        event, data = {"enum": names}, _json_data(payload)
    event_schema = obj({"event": event, "data": data, "id": {"type": "string"}}, ("data",))
    return {"text/event-stream": {"schema": event_schema}}


STREAM_ERROR = obj(
    {"error": obj({"message": {"type": "string"}, "type": {"type": "string"}}, ("message",))},
    ("error",),
)


def _chunk(object_name: str, choice: Schema) -> Schema:
    return {
        "anyOf": [
            obj(
                {
                    "id": {"type": "string"},
                    "object": {"const": object_name},
                    "created": {"type": "integer"},
                    "model": {"type": "string"},
                    "system_fingerprint": {"type": "string"},
                    "choices": {"type": "array", "items": choice},
                    "usage": nullable(USAGE),
                },
                ("id", "object", "created", "model", "choices"),
            ),
            STREAM_ERROR,
        ]
    }


CHAT_CHUNK = _chunk(
    "chat.completion.chunk",
    obj(
        {
            "index": {"type": "integer"},
            "delta": obj(
                {
                    "role": {"const": "assistant"},
                    "content": {"type": ["string", "null"]},
                    "reasoning_content": {"type": "string"},
                    "tool_calls": {"type": "array", "items": {"type": "object"}},
                }
            ),
            "logprobs": {"type": ["object", "null"]},
            "finish_reason": nullable(FINISH_REASON),
        },
        ("index", "delta", "finish_reason"),
    ),
)

TEXT_CHUNK = _chunk(
    "text_completion",
    obj(
        {
            "index": {"type": "integer"},
            "text": {"type": "string"},
            "logprobs": {"type": ["object", "null"]},
            "finish_reason": nullable(FINISH_REASON),
        },
        ("index", "text", "finish_reason"),
    ),
)

ANTHROPIC_EVENT = obj(
    {
        "type": {"enum": ANTHROPIC_EVENTS},
        "message": ref("Message"),
        "index": {"type": "integer"},
        "content_block": {"type": "object"},
        "delta": {"type": "object"},
        "usage": {"type": "object"},
        "error": obj({"type": {"type": "string"}, "message": {"type": "string"}}),
    },
    ("type",),
)

RESPONSES_EVENT = obj(
    {
        "type": {"enum": RESPONSES_EVENTS},
        "sequence_number": {"type": "integer", "minimum": 0},
        "response": ref("Response"),
        "output_index": {"type": "integer"},
        "item": {"type": "object"},
        "delta": {"type": "string"},
    },
    ("type", "sequence_number"),
)


def components() -> dict[str, Schema]:
    return {
        "ChatCompletionChunk": CHAT_CHUNK,
        "TextCompletionChunk": TEXT_CHUNK,
        "MessageStreamEvent": ANTHROPIC_EVENT,
        "ResponseStreamEvent": RESPONSES_EVENT,
    }
