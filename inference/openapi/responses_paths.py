"""/v1/responses (OpenAI Responses, with stored history) as OpenAPI operations."""

from __future__ import annotations

from .common import (
    HLG,
    SEED,
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
    path_param,
    ref,
    session_field,
    stop_field,
)
from .openai_requests import ANY_DESCRIPTION, STRUCTURED_FIELDS, media_limits
from .streams import RESPONSES_EVENTS, event_stream
from .usage import FILL

INPUT_IMAGE = obj(
    {
        "type": {"const": "input_image"},
        "image_url": {
            "type": "string",
            "description": "A base64 data: URL of a PNG, JPEG or WebP image, or an http(s) URL "
            "the server fetches (the bounds: `input`); in user messages, for a model that takes "
            "images.",
        },
        "detail": {},
    },
    ("type", "image_url"),
)
INPUT_FILE = obj(
    {
        "type": {"const": "input_file"},
        "file_data": {
            "type": "string",
            "description": "An image sent as a file: a base64 data: URL of a PNG, JPEG or WebP "
            "image, read as an input_image's (no other files; no file ids or file URLs).",
        },
        "filename": {"type": "string"},
    },
    ("type", "file_data"),
)
TEXT_CONTENT = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {
                "anyOf": [
                    obj(
                        {"type": {"enum": ["input_text", "output_text", "text"]}, "text": {}},
                        ("type",),
                    ),
                    INPUT_IMAGE,
                    INPUT_FILE,
                ]
            },
        },
    ]
}

# One variant per item type; fields the server passes on unchecked have no type here.
INPUT_ITEM = {
    "anyOf": [
        obj(
            {
                "type": {"const": "message", "description": "the default"},
                "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                "content": TEXT_CONTENT,
            },
            ("role", "content"),
        ),
        obj(
            {
                "type": {"const": "function_call"},
                "call_id": {},
                "name": {},
                "arguments": {"description": "the call's arguments as JSON text"},
            },
            ("type",),
        ),
        obj({"type": {"const": "function_call_output"}, "call_id": {}, "output": {}}, ("type",)),
        obj({"type": {"const": "reasoning"}, "content": {}, "summary": {}}, ("type",)),
    ]
}


def responses_request(limit: int) -> Schema:
    return obj(
        {
            "model": {"type": ["string", "null"]},
            "input": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": INPUT_ITEM}],
                "description": media_limits(),
            },
            "instructions": {"type": ["string", "null"]},
            "previous_response_id": {"type": ["string", "null"]},
            "store": {"type": "boolean", "default": True},
            "stream": {"type": ["boolean", "null"]},
            "max_output_tokens": max_tokens_field(limit),
            "prompt_cache_key": session_field(),
            "temperature": number(0),
            "top_p": number(0, 1),
            "top_k": integer(0),
            "min_p": number(0, 1),
            "seed": SEED,
            "stop": stop_field(),
            "hlg": HLG,
            **kv_fields(),
            **draft_fields(),
            "metadata": nullable(
                {
                    "type": "object",
                    "maxProperties": 16,
                    "propertyNames": {"maxLength": 64},
                    "additionalProperties": {"type": "string", "maxLength": 512},
                }
            ),
            "tools": nullable(
                {
                    "type": "array",
                    "items": obj(
                        {
                            "type": {"const": "function"},
                            "name": {"type": "string"},
                            "description": ANY_DESCRIPTION,
                            "parameters": {"type": "object"},
                        },
                        ("type", "name"),
                    ),
                }
            ),
            "tool_choice": {},
            "text": {
                "description": "{format: ...}; a value that is not an object is ignored.",
                "anyOf": [
                    obj({"format": nullable(obj({"type": {"type": "string"}, "schema": {}}))}),
                    {"not": {"type": "object"}},
                ],
            },
            "reasoning": nullable(
                obj(
                    {
                        "effort": nullable(
                            {"enum": ["none", "minimal", "low", "medium", "high", "xhigh"]}
                        )
                    }
                )
            ),
            **{
                name: STRUCTURED_FIELDS[name] for name in STRUCTURED_FIELDS if name[:7] == "guided_"
            },
        },
        ("input",),
    )


OUTPUT_ITEM = obj(
    {
        "type": {"enum": ["message", "reasoning", "function_call"]},
        "id": {"type": "string"},
        "status": {"type": "string"},
    },
    ("type", "id"),
)

RESPONSE = obj(
    {
        "id": {"type": "string"},
        "object": {"const": "response"},
        "created_at": {"type": "integer"},
        "status": {"enum": ["completed", "incomplete", "in_progress", "failed"]},
        "model": {"type": "string"},
        "output": {"type": "array", "items": OUTPUT_ITEM},
        "usage": nullable(
            obj(
                {
                    "input_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                    "total_tokens": {"type": "integer"},
                    "fill": FILL,
                },
                ("input_tokens", "output_tokens"),
            )
        ),
        "error": {"type": ["object", "null"]},
        "incomplete_details": {"type": ["object", "null"]},
        "store": {"type": "boolean"},
        "previous_response_id": {"type": ["string", "null"]},
    },
    ("id", "object", "created_at", "status", "model", "output"),
)

RESPONSE_ID = path_param("response_id", example="resp_0123456789abcdef")


def components(limit: int) -> dict[str, Schema]:
    return {
        "ResponseRequest": responses_request(limit),
        "Response": RESPONSE,
        "ResponseDeleted": obj(
            {"id": {"type": "string"}, "object": {"const": "response"}, "deleted": {"const": True}},
            ("id", "object", "deleted"),
        ),
        "ResponseInputItems": obj(
            {
                "object": {"const": "list"},
                "data": {"type": "array", "items": {"type": "object"}},
                "first_id": {"type": ["string", "null"]},
                "last_id": {"type": ["string", "null"]},
                "has_more": {"type": "boolean"},
            },
            ("object", "data", "has_more"),
        ),
    }


# What a created response leads to: retrieve, list its input, continue, delete.
_CREATED_ID = {"response_id": "$response.body#/id"}
STORED_RESPONSE_LINKS = {
    "Retrieve": {"operationId": "responses_retrieve", "parameters": _CREATED_ID},
    "InputItems": {"operationId": "responses_input_items", "parameters": _CREATED_ID},
    "Continue": {
        "operationId": "responses_create",
        "requestBody": {
            "model": "$response.body#/model",
            "input": "Go on",
            "max_output_tokens": 1,
            "previous_response_id": "$response.body#/id",
        },
    },
    "Delete": {"operationId": "responses_delete", "parameters": _CREATED_ID},
}


def paths(default_model: str) -> dict[str, Schema]:
    example = {"model": default_model, "input": "Hi", "max_output_tokens": 1}
    tags = ["openai"]
    return {
        "/v1/responses": {
            "post": {
                "operationId": "responses_create",
                "summary": "Create a response (OpenAI Responses); stored unless store is false",
                "tags": tags,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": ref("ResponseRequest"), "example": example}
                    },
                },
                "responses": {
                    "200": {
                        "description": "The response; with `stream: true`, its typed events.",
                        "headers": WARNING_HEADER,
                        "content": {
                            **json_content(ref("Response")),
                            **event_stream(names=RESPONSES_EVENTS, payload="ResponseStreamEvent"),
                        },
                        "links": STORED_RESPONSE_LINKS,
                    },
                    **errors("OpenAIError", 400, 404, 500, 502),
                },
            }
        },
        "/v1/responses/{response_id}": {
            "get": {
                "operationId": "responses_retrieve",
                "summary": "A stored response",
                "tags": tags,
                "parameters": [RESPONSE_ID],
                "responses": {
                    "200": {"description": "As served", "content": json_content(ref("Response"))},
                    **errors("OpenAIError", 404),
                },
            },
            "delete": {
                "operationId": "responses_delete",
                "summary": "Delete a stored response",
                "tags": tags,
                "parameters": [RESPONSE_ID],
                "responses": {
                    "200": {
                        "description": "Deleted",
                        "content": json_content(ref("ResponseDeleted")),
                    },
                    **errors("OpenAIError", 404),
                },
            },
        },
        "/v1/responses/{response_id}/input_items": {
            "get": {
                "operationId": "responses_input_items",
                "summary": "The input items of a stored response",
                "tags": tags,
                "parameters": [RESPONSE_ID],
                "responses": {
                    "200": {
                        "description": "Items",
                        "content": json_content(ref("ResponseInputItems")),
                    },
                    **errors("OpenAIError", 404),
                },
            }
        },
    }
