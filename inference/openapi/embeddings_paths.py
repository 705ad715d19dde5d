"""/v1/embeddings and /v1/rerank as OpenAPI operations (inference/api/embeddings_*.py,
inference/api/rerank_*.py).

The input bounds are the server's (MLXLAB_EMBEDDING_MAX_INPUTS and
MLXLAB_EMBEDDING_MAX_INPUT_TOKENS), so the schema says what this server takes.
"""

from __future__ import annotations

from labsettings import lab_settings

from .common import Schema, errors, json_content, nullable, obj, ref

TOKEN = {"type": "integer", "minimum": 0}


def embedding_request() -> Schema:
    inputs, tokens = lab_settings.embedding_max_inputs, lab_settings.embedding_max_input_tokens
    token_list = {"type": "array", "items": TOKEN, "minItems": 1, "maxItems": tokens}
    text = {"type": "string", "minLength": 1}
    return obj(
        {
            "input": {
                "description": "What to embed: a string, strings, token ids, or lists of "
                f"token ids; at most {inputs} inputs of at most {tokens} tokens each (and "
                "within the model's context).",
                "anyOf": [
                    text,
                    {"type": "array", "items": text, "minItems": 1, "maxItems": inputs},
                    token_list,
                    {"type": "array", "items": token_list, "minItems": 1, "maxItems": inputs},
                ],
            },
            "model": nullable(
                {"type": "string", "description": "An embedding model; unset: the default model"}
            ),
            "encoding_format": nullable(
                {
                    "type": "string",
                    "enum": ["float", "base64"],
                    "description": "base64: each vector's little-endian float32 bytes",
                }
            ),
            "dimensions": nullable(
                {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Keep the vector's first N values, then re-normalize "
                    "(Matryoshka); at most the model's vector length",
                }
            ),
            "user": nullable({"type": "string", "description": "Accepted, not used"}),
        },
        ("input",),
    )


EMBEDDING_LIST = obj(
    {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": obj(
                {
                    "object": {"const": "embedding"},
                    "index": {"type": "integer"},
                    "embedding": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}},
                            {"type": "string", "contentEncoding": "base64"},
                        ]
                    },
                },
                ("object", "index", "embedding"),
            ),
        },
        "model": {"type": "string"},
        "usage": obj(
            {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}},
            ("prompt_tokens", "total_tokens"),
        ),
    },
    ("object", "data", "model", "usage"),
)


def rerank_request() -> Schema:
    documents, tokens = lab_settings.embedding_max_inputs, lab_settings.embedding_max_input_tokens
    text = {"type": "string", "minLength": 1}
    document = {"anyOf": [text, obj({"text": text}, ("text",))]}
    return obj(
        {
            "model": nullable(
                {"type": "string", "description": "A reranker; unset: the default model"}
            ),
            "query": text,
            "documents": {
                "description": f"At most {documents} documents, strings or {{text}} objects; "
                f"each, with the query, at most {tokens} tokens (and within the model's "
                "context).",
                "type": "array",
                "items": document,
                "minItems": 1,
                "maxItems": documents,
            },
            "top_n": nullable(
                {"type": "integer", "minimum": 1, "description": "Unset: every document"}
            ),
            "return_documents": nullable(
                {"type": "boolean", "description": "Unset: true, as vLLM and Jina default it"}
            ),
            "instruction": nullable(
                {
                    "type": "string",
                    "minLength": 1,
                    "description": "A decoder reranker's task line (Qwen3-Reranker's "
                    "<Instruct>); unset: its default. Encoder cross-encoders take none.",
                }
            ),
        },
        ("query", "documents"),
    )


RERANK_RESULT = obj(
    {
        "id": {"type": "string"},
        "model": {"type": "string"},
        "results": {
            "description": "Best first, at most top_n",
            "type": "array",
            "items": obj(
                {
                    "index": {"type": "integer", "description": "The document's position"},
                    "relevance_score": {
                        "type": "number",
                        "description": "sigmoid of the cross-encoder's logit, as "
                        "sentence-transformers' CrossEncoder reports it (the logit where "
                        "the model's config names the identity)",
                    },
                    "document": obj({"text": {"type": "string"}}, ("text",)),
                },
                ("index", "relevance_score"),
            ),
        },
        "usage": obj({"total_tokens": {"type": "integer"}}, ("total_tokens",)),
    },
    ("id", "model", "results", "usage"),
)


def components() -> dict[str, Schema]:
    return {
        "EmbeddingRequest": embedding_request(),
        "EmbeddingList": EMBEDDING_LIST,
        "RerankRequest": rerank_request(),
        "RerankResult": RERANK_RESULT,
    }


def paths(default_model: str) -> dict[str, Schema]:
    example = {"model": default_model, "input": ["The cat sat on the mat", "A dog"]}
    return {
        "/v1/embeddings": {
            "post": {
                "operationId": "embeddings_create",
                "summary": "Embeddings (OpenAI): one vector per input, from an embedding model",
                "tags": ["openai"],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": ref("EmbeddingRequest"), "example": example}
                    },
                },
                "responses": {
                    "200": {
                        "description": "The vectors, in the inputs' order",
                        "content": json_content(ref("EmbeddingList")),
                    },
                    **errors("OpenAIError", 400, 404, 500, 502),
                },
            }
        },
        "/v1/rerank": {
            "post": {
                "operationId": "rerank_create",
                "summary": "Rerank (vLLM, Cohere, Jina): documents scored against a query by a "
                "cross-encoder, best first",
                "tags": ["openai"],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": ref("RerankRequest"),
                            "example": {
                                "model": "bge-reranker-base",
                                "query": "What is the capital of France?",
                                "documents": ["Paris is the capital of France.", "A dog"],
                                "top_n": 1,
                            },
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The documents' scores, best first",
                        "content": json_content(ref("RerankResult")),
                    },
                    **errors("OpenAIError", 400, 404, 500, 502),
                },
            }
        },
    }
