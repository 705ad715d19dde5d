"""Request bodies of /v1/chat/completions and /v1/completions (inference/api/openai_*.py)."""

from __future__ import annotations

from labsettings import lab_settings

from ..chat.messages import MEDIA_PARTS
from ..media.remote import MAX_REDIRECTS
from .common import PREDICTION, Schema, nullable, obj, openai_generation_fields


def media_limits() -> str:
    """The media bounds of the running server, for the description of a turn's messages
    (images spread over its messages: no maxItems can count them)."""
    settings = lab_settings
    return (
        f"Media in user messages, for a model that takes them: at most {settings.max_images} "
        f"images per request (MLXLAB_MAX_IMAGES), each at most {settings.max_image_pixels} "
        f"pixels, width x height (MLXLAB_MAX_IMAGE_PIXELS), and {settings.max_image_bytes} "
        "bytes (MLXLAB_MAX_IMAGE_BYTES). An http(s) image URL is fetched by the server within "
        f"{settings.media_fetch_seconds:g} seconds (MLXLAB_MEDIA_FETCH_SECONDS), at most "
        f"{MAX_REDIRECTS} redirects, from public addresses only unless the server allows "
        f"others (MLXLAB_MEDIA_ALLOW_PRIVATE). Audio, once served: at most "
        f"{settings.max_audio_seconds:g} seconds per input (MLXLAB_MAX_AUDIO_SECONDS). Past a "
        "bound: a 400 naming it."
    )


# Any part with a string `text` is text (OpenAI's `text`, the Responses API's
# `input_text`...); media parts need a model that sees them (chat/messages.py).
TEXT_PART = obj(
    {"type": {"type": "string", "not": {"enum": list(MEDIA_PARTS)}}, "text": {"type": "string"}},
    ("text",),
)

# Media parts, in user messages only; a model that does not take them answers a 400.
IMAGE_URL_PART = obj(
    {
        "type": {"const": "image_url"},
        "image_url": {
            "anyOf": [
                obj({"url": {"type": "string"}, "detail": {}}, ("url",)),
                {"type": "string"},
            ],
            "description": "A base64 data: URL of a PNG, JPEG or WebP image, or an http(s) "
            "URL the server fetches (the bounds: `messages`).",
        },
    },
    ("type", "image_url"),
)
INPUT_AUDIO_PART = obj(
    {
        "type": {"const": "input_audio"},
        "input_audio": obj(
            {
                "data": {"type": "string", "description": "base64"},
                "format": {"enum": ["wav", "mp3"]},
            },
            ("data", "format"),
        ),
    },
    ("type", "input_audio"),
)

MESSAGE_CONTENT = nullable({"anyOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]})
USER_CONTENT = nullable(
    {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"anyOf": [TEXT_PART, IMAGE_URL_PART, INPUT_AUDIO_PART]}},
        ]
    }
)
# Passed to the chat template as sent: no type is checked.
TEMPLATE_FIELDS = {"name": {}, "tool_call_id": {"description": "a tool message's call id"}}

CHAT_MESSAGE = {
    "anyOf": [
        obj(
            {
                "role": {"enum": ["system", "developer", "tool"]},
                "content": MESSAGE_CONTENT,
                **TEMPLATE_FIELDS,
            },
            ("role",),
        ),
        obj({"role": {"const": "user"}, "content": USER_CONTENT, **TEMPLATE_FIELDS}, ("role",)),
        obj(
            {
                "role": {"const": "assistant"},
                "content": MESSAGE_CONTENT,
                **TEMPLATE_FIELDS,
                "reasoning": {"description": "earlier reasoning (a string; others are ignored)"},
                "tool_calls": {
                    "type": ["array", "null"],
                    "description": "The assistant's earlier calls.",
                    "items": obj(
                        {
                            "id": {},
                            "type": {},
                            "function": obj(
                                {
                                    "name": {},
                                    "arguments": {"description": "JSON text, or an object"},
                                }
                            ),
                        },
                        ("function",),
                    ),
                },
            },
            ("role",),
        ),
    ]
}

# Tool descriptions go to the chat template as sent (Anthropic's drop a non-string).
ANY_DESCRIPTION = {"description": "A string; the server does not check it"}

TOOL = obj(
    {
        "type": {"const": "function"},
        "function": obj(
            {
                "name": {"type": "string"},
                "description": ANY_DESCRIPTION,
                "parameters": {"type": "object", "description": "A JSON schema."},
            },
            ("name",),
        ),
    },
    ("function",),
)

TOOL_CHOICE = {
    "anyOf": [
        {"enum": ["auto", "none", "required"]},
        obj(
            {
                "type": {"const": "function"},
                "function": obj({"name": {"type": "string"}}, ("name",)),
            },
            ("type", "function"),
        ),
    ]
}

SCHEMA_OR_TEXT = {
    "anyOf": [{"type": "object"}, {"type": "string", "description": "a JSON schema as text"}]
}

STRUCTURED_FIELDS: dict[str, Schema] = {
    "response_format": nullable(
        {
            "anyOf": [
                obj({"type": {"enum": ["text", "json_object"]}}, ("type",)),
                obj(
                    {
                        "type": {"const": "json_schema"},
                        "json_schema": obj({"name": {}, "schema": SCHEMA_OR_TEXT}, ("schema",)),
                    },
                    ("type", "json_schema"),
                ),
            ]
        }
    ),
    "guided_json": nullable(SCHEMA_OR_TEXT),
    "structured_outputs": nullable(SCHEMA_OR_TEXT),
    "guided_regex": nullable({"type": "string", "minLength": 1}),
    "guided_choice": nullable(
        {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
    ),
    "guided_grammar": nullable({"type": "string", "minLength": 1, "description": "EBNF"}),
}


def chat_request(limit: int) -> Schema:
    return obj(
        {
            **openai_generation_fields(limit),
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": CHAT_MESSAGE,
                "description": media_limits(),
            },
            "logprobs": {"type": ["boolean", "null"]},
            "tools": nullable({"type": "array", "items": TOOL}),
            "tool_choice": TOOL_CHOICE,
            **STRUCTURED_FIELDS,
            "reasoning_effort": nullable(
                {"enum": ["none", "minimal", "low", "medium", "high", "xhigh"]}
            ),
            "chat_template_kwargs": nullable({"type": "object"}),
            "prediction": PREDICTION,
        },
        ("messages",),
    )


def completion_request(limit: int) -> Schema:
    return obj(
        {
            **openai_generation_fields(limit),
            "prompt": {"type": "string", "minLength": 1, "description": "Text only, no tokens."},
            "logprobs": {
                "type": ["boolean", "null"],
                "description": "A bool, as in mlx_lm.server (not the legacy API's count): "
                "top_logprobs says how many alternatives.",
            },
        },
        ("prompt",),
    )
