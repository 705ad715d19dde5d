"""/v1/chat/completions, /v1/completions and /v1/models as OpenAPI operations
(/v1/embeddings, /v1/rerank: embeddings_paths.py)."""

from __future__ import annotations

from ..protocol.sampling import HLG_DEFAULTS
from .common import (
    WARNING_HEADER,
    Schema,
    errors,
    json_content,
    nullable,
    obj,
    path_param,
    ref,
)
from .openai_requests import chat_request, completion_request
from .streams import event_stream
from .usage import FINISH_REASON, USAGE

TOP_LOGPROB = obj(
    {
        "token": {"type": "string"},
        "logprob": {"type": "number"},
        "bytes": {"type": "array", "items": {"type": "integer"}},
    },
    ("token", "logprob"),
)
CHAT_LOGPROBS = nullable(
    obj(
        {
            "content": {
                "type": "array",
                "items": obj(
                    {
                        **TOP_LOGPROB["properties"],
                        "top_logprobs": {"type": "array", "items": TOP_LOGPROB},
                    },
                    ("token", "logprob", "top_logprobs"),
                ),
            }
        },
        ("content",),
    )
)
TOOL_CALL = obj(
    {
        "id": {"type": "string"},
        "type": {"const": "function"},
        "function": obj(
            {"name": {"type": "string"}, "arguments": {"type": "string"}}, ("name", "arguments")
        ),
    },
    ("id", "type", "function"),
)


def completion_object(object_name: str, choice: dict, choice_required: tuple) -> dict:
    """The envelope both completion endpoints share (openai_render.Renderer._envelope)."""
    return obj(
        {
            "id": {"type": "string"},
            "object": {"const": object_name},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "system_fingerprint": {"type": "string"},
            "choices": {"type": "array", "items": obj(choice, choice_required)},
            "usage": ref("OpenAIUsage"),
        },
        ("id", "object", "created", "model", "choices", "usage"),
    )


CHAT_COMPLETION = completion_object(
    "chat.completion",
    {
        "index": {"type": "integer"},
        "message": obj(
            {
                "role": {"const": "assistant"},
                "content": {"type": ["string", "null"]},
                "reasoning_content": {"type": "string"},
                "tool_calls": {"type": "array", "items": TOOL_CALL},
            },
            ("role", "content"),
        ),
        "logprobs": CHAT_LOGPROBS,
        "finish_reason": FINISH_REASON,
    },
    ("index", "message", "finish_reason"),
)

TEXT_COMPLETION = completion_object(
    "text_completion",
    {
        "index": {"type": "integer"},
        "text": {"type": "string"},
        "logprobs": nullable(
            obj(
                {
                    "tokens": {"type": "array", "items": {"type": "string"}},
                    "token_logprobs": {"type": "array", "items": {"type": "number"}},
                    "top_logprobs": {"type": "array", "items": {"type": "object"}},
                    "text_offset": {"type": "array", "items": {"type": "integer"}},
                }
            )
        ),
        "finish_reason": FINISH_REASON,
    },
    ("index", "text", "finish_reason"),
)

MODEL = obj(
    {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
        "context_length": {"type": "integer"},
        "capabilities": {
            "description": "What the model serves: chat (chat and text completions, "
            "Responses, Messages), embeddings (/v1/embeddings) or rerank (/v1/rerank); "
            "empty for a folder whose embedding modules or classifier this server does not "
            "serve. A chat model that takes images in its messages adds vision; one that "
            "takes audio, audio.",
            "type": "array",
            "items": {"enum": ["chat", "embeddings", "rerank", "vision", "audio"]},
        },
        "defaults": {
            "description": "Retrieve only: what a request gets for each sampling field it "
            "leaves out, and where each value came from (the server's MLXLAB_DEFAULT_*, the "
            "model's generation_config.json, or the fallback); enable_thinking null: the "
            "chat template's own default.",
            **obj(
                {
                    "temperature": {"type": "number"},
                    "top_p": {"type": "number"},
                    "top_k": {"type": "integer"},
                    "min_p": {"type": "number"},
                    "repetition_penalty": {"type": ["number", "null"]},
                    "no_think_temperature": {"type": "number"},
                    "enable_thinking": {"type": ["boolean", "null"]},
                    "chat_max_tokens": {"type": "integer"},
                    "completion_max_tokens": {"type": "integer"},
                    "hlg": obj(
                        {
                            "enabled": {"type": "boolean"},
                            **{name: {"type": "number"} for name in HLG_DEFAULTS},
                        }
                    ),
                    "sources": {
                        "type": "object",
                        "additionalProperties": {"enum": ["server", "model", "fallback"]},
                    },
                }
            ),
        },
        "batching": {
            "description": "Retrieve only, once a worker has loaded the model (else null): "
            "whether its rows share a batch and its prompts prefill together, and why not "
            "(a cache that cannot merge rows, model code that takes no batch, recurrent "
            "state that padding would reach).",
            "anyOf": [
                obj(
                    {
                        "rows": {"enum": ["together", "one at a time"]},
                        "prompts": {"enum": ["together", "one at a time"]},
                        "why": {"type": ["string", "null"]},
                    }
                ),
                {"type": "null"},
            ],
        },
    },
    ("id", "object", "created", "owned_by"),
)


def _generation(
    operation_id: str, summary: str, request: str, response: str, chunk: str, example: Schema
):
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["openai"],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref(request), "example": example}},
            },
            "responses": {
                "200": {
                    "description": "The completion; with `stream: true`, server-sent events "
                    "of chunks, then `data: [DONE]`.",
                    "headers": WARNING_HEADER,
                    "content": {
                        **json_content(ref(response)),
                        **event_stream(names=None, payload=chunk),
                    },
                },
                **errors("OpenAIError", 400, 404, 500, 502),
            },
        }
    }


def components(limit: int) -> dict[str, Schema]:
    return {
        "ChatCompletionRequest": chat_request(limit),
        "CompletionRequest": completion_request(limit),
        "ChatCompletion": CHAT_COMPLETION,
        "TextCompletion": TEXT_COMPLETION,
        "OpenAIUsage": USAGE,
        "Model": MODEL,
        "ModelList": obj(
            {"object": {"const": "list"}, "data": {"type": "array", "items": ref("Model")}},
            ("object", "data"),
        ),
    }


def paths(default_model: str) -> dict[str, Schema]:
    chat_example = {
        "model": default_model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1,
    }
    completion_example = {"model": default_model, "prompt": "Once upon", "max_tokens": 1}
    return {
        "/v1/chat/completions": _generation(
            "chat_completions_create",
            "Chat completion (OpenAI)",
            "ChatCompletionRequest",
            "ChatCompletion",
            "ChatCompletionChunk",
            chat_example,
        ),
        "/v1/completions": _generation(
            "completions_create",
            "Text completion (OpenAI, string prompts only)",
            "CompletionRequest",
            "TextCompletion",
            "TextCompletionChunk",
            completion_example,
        ),
        "/v1/models": {
            "get": {
                "operationId": "models_list",
                "summary": "The registered models",
                "tags": ["openai"],
                "responses": {
                    "200": {"description": "Models", "content": json_content(ref("ModelList"))},
                    **errors("OpenAIError"),
                },
            }
        },
        "/v1/models/{name}": {
            "get": {
                "operationId": "models_retrieve",
                "summary": "One registered model",
                "tags": ["openai"],
                "parameters": [path_param("name", example=default_model)],
                "responses": {
                    "200": {"description": "The model", "content": json_content(ref("Model"))},
                    **errors("OpenAIError", 404),
                },
            }
        },
    }
