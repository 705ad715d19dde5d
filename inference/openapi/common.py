"""Schema pieces shared by the /v1 operations: errors, sampling fields, helpers."""

from __future__ import annotations

from typing import Any

from labsettings import lab_settings

from ..protocol.sampling import HLG_DEFAULTS, HLG_LIMITS, MAX_KV_LAYERS

Schema = dict[str, Any]

MAX_TOP_LOGPROBS = 11  # as inference/engine/prompting/request.py (mlx_lm.server's cap)


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """The parsers treat null as absent, so every optional field also accepts null."""
    kind = schema.get("type")
    if isinstance(kind, str):
        schema = {**schema, "type": [kind, "null"]}
        return {**schema, "enum": [*schema["enum"], None]} if "enum" in schema else schema
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (), **extra) -> Schema:
    """An object; unknown fields are allowed, as every parser here ignores them."""
    schema: Schema = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


def path_param(name: str, **extra) -> Schema:
    """A required string parameter of the path (`extra`: its example, description)."""
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}, **extra}


def json_content(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def json_body(schema: Schema) -> Schema:
    return {"required": True, "content": json_content(schema)}


WARNING_HEADER = {
    "Warning": {
        "description": "Set when a grammar could not be enforced and the request fell back "
        "to an instruction in the system message.",
        "schema": {"type": "string"},
    }
}

OPENAI_ERROR = obj(
    {
        "error": obj(
            {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
            ("message", "type", "param", "code"),
        )
    },
    ("error",),
)

ANTHROPIC_ERROR = obj(
    {
        "type": {"const": "error"},
        "error": obj(
            {"type": {"type": "string"}, "message": {"type": "string"}}, ("type", "message")
        ),
    },
    ("type", "error"),
)

# mlx-bun's answer when no model worker can take a request, or one died under it.
ENGINE_UNAVAILABLE_ERROR = obj(
    {
        "error": obj(
            {
                "message": {"type": "string"},
                "type": {"const": "engine_unavailable"},
                "state": {"type": "string"},
            },
            ("message", "type", "state"),
        )
    },
    ("error",),
)

ERROR_MEANINGS = {
    400: "Invalid request: the message names the first invalid field",
    401: "An API key is required (once any exists) and was missing, wrong or revoked",
    403: "Only a staff user's key or session may call this",
    404: "Unknown model, stored response or endpoint",
    405: "Method not allowed (see the Allow header)",
    413: "Request body larger than the limit for this path",
    500: "The engine failed on a valid request",
    502: "Inference engine unavailable: no model worker could take the request, or its "
    "worker stopped before the answer started (retry shortly)",
    503: "A loaded model's engine has stopped",
}


def errors(schema_name: str, *codes: int) -> dict[str, Schema]:
    """Error responses in one protocol's shape; 401, 405 and 413 can answer any operation."""
    out = {}
    for code in sorted({*codes, 401, 405, 413}):
        shape = "EngineUnavailableError" if code == 502 and schema_name == "OpenAIError" else None
        response: Schema = {
            "description": ERROR_MEANINGS[code],
            "content": json_content(ref(shape or schema_name)),
        }
        if code == 401:
            response["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
        if code == 405:
            response["headers"] = {"Allow": {"schema": {"type": "string"}}}
        out[str(code)] = response
    return out


def number(low: float | None = None, high: float | None = None) -> Schema:
    schema: Schema = {"type": "number"}
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return nullable(schema)


def integer(low: int | None = None, high: int | None = None) -> Schema:
    schema: Schema = {"type": "integer"}
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return nullable(schema)


def max_tokens_field(limit: int) -> Schema:
    """At least 1; at most MLXLAB_MAX_TOKENS_LIMIT when the server sets one."""
    schema = integer(1, limit or None)
    schema["description"] = "Tokens to generate at most; the prompt and this must fit the context."
    return schema


def stop_list() -> Schema:
    """A list of stop sequences: entries that are not strings, and empty strings, are
    accepted and dropped, as mlx-bun drops them; the count is of the entries sent."""
    text = {"type": "string", "maxLength": lab_settings.max_stop_chars}
    entry = {"anyOf": [text, {"not": {"type": "string"}}]}
    return {"type": "array", "items": entry, "maxItems": lab_settings.max_stop_sequences}


def stop_field() -> Schema:
    """OpenAI's `stop`: one string or a list (stop_list)."""
    text = {"type": "string", "maxLength": lab_settings.max_stop_chars}
    return nullable({"anyOf": [text, stop_list()]})


SEED = integer(-(2**63), 2**64 - 1)


def sampling_fields() -> dict[str, Schema]:
    """mlx_lm.server's sampling fields, names and ranges (inference/chat/fields.py)."""
    return {
        "temperature": {
            **number(0),
            "description": "Unset: the model's default (GET /v1/models/{name}, `defaults`).",
        },
        "top_p": number(0, 1),
        "top_k": {**integer(0), "description": "0 (off), or less than the model's vocabulary"},
        "min_p": number(0, 1),
        "xtc_probability": number(0, 1),
        "xtc_threshold": number(0, 0.5),
        "seed": SEED,
        "logit_bias": nullable(
            {
                "type": "object",
                "description": "Token id (as a string) to a bias added to its logit.",
                "propertyNames": {"pattern": r"^\s*[-+]?[0-9]+\s*$"},
                "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
                "maxProperties": lab_settings.max_logit_bias,
            }
        ),
        "repetition_penalty": number(0),
        "repetition_context_size": integer(0, lab_settings.max_penalty_context),
        "presence_penalty": number(),
        "presence_context_size": integer(0, lab_settings.max_penalty_context),
        "frequency_penalty": number(),
        "frequency_context_size": integer(0, lab_settings.max_penalty_context),
        "hlg": HLG,
        "stop": stop_field(),
    }


def _knob(name: str, about: str) -> Schema:
    low, high = HLG_LIMITS[name]
    return {
        **number(low, high),
        "description": f"{about} Unset: the server's, else {HLG_DEFAULTS[name]:g}.",
    }


# docs/API.md, "HLG tone-curve sampling"; inference/chat/fields.py `hlg` checks it.
HLG = nullable(
    obj(
        {
            "enabled": {
                "type": ["boolean", "null"],
                "description": "Unset: the server's (MLXLAB_HLG_SAMPLING), else off.",
            },
            "width": _knob("width", "The pass-through band around the pivot, in logits."),
            "shoulder": _knob(
                "shoulder", "The head's compression: how far past the band the slope halves."
            ),
            "toe": _knob("toe", "The tail's compression: how far past the band the slope halves."),
            "pivot_offset": _knob("pivot_offset", "The pivot's distance below the top logit."),
        }
    )
)


def kv_fields() -> dict[str, Schema]:
    """mlx-lm's quantized KV cache, per request (docs/API.md, "Quantized KV cache")."""
    return {
        "kv_bits": {
            "type": ["integer", "null"],
            "enum": [4, 8, None],
            "description": "A quantized KV cache of 4 or 8 bits; unset: the model's or server's.",
        },
        "kv_group_size": {"type": ["integer", "null"], "enum": [32, 64, 128, None]},
        "quantized_kv_start": {
            **integer(0),
            "description": "Tokens the cache holds unquantized before it quantizes.",
        },
        "kv_config": {
            "type": ["array", "null"],
            "items": KV_LAYER,
            "minItems": 1,
            "maxItems": MAX_KV_LAYERS,
            "description": (
                "One KV scheme per layer of the model, in order (null: that layer plain); "
                "replaces kv_bits and kv_group_size; quantized_kv_start unset: 0. Another "
                "length than the model's layers is a 400."
            ),
        },
    }


# docs/API.md, "Quantized KV cache"; inference/chat/fields.py `kv_config` checks it.
KV_LAYER = {
    "type": ["object", "null"],
    "properties": {
        "bits": {"type": "integer", "enum": [4, 8]},
        "group_size": {"type": "integer", "enum": [32, 64, 128]},
    },
    "required": ["bits"],
    "additionalProperties": False,
}


def draft_fields() -> dict[str, Schema]:
    """Speculative decoding (docs/API.md, "Speculative decoding")."""
    return {
        "draft_model": {
            "type": ["string", "null"],
            "minLength": 1,
            "maxLength": 200,
            "description": (
                "ngram: drafts by prompt lookup; none: no drafts; or a registered model's "
                "name (sharing this model's vocabulary) whose greedy tokens are the drafts. "
                "Unset: the model's default draft model, if it has one."
            ),
        },
        "num_draft_tokens": {**integer(1, 64), "description": "Most tokens drafted a step."},
    }


PREDICTION = nullable(
    obj(
        {
            "type": {"enum": ["content"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "items": obj(
                            {"type": {"enum": ["text"]}, "text": {"type": "string"}},
                            ("type", "text"),
                        ),
                    },
                ]
            },
        },
        ("type", "content"),
        description="OpenAI's Predicted Outputs: text the reply likely repeats, drafted from.",
    )
)


def session_field(mlx_bun_name: bool = False) -> Schema:
    name = "mlx-bun's name for prompt_cache_key" if mlx_bun_name else "OpenAI's field"
    return {
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": 256,
        "description": (
            f"A prompt-cache session ({name}): its last turn is kept apart from the "
            "cache's LRU for the next turn of the same session."
        ),
    }


def openai_generation_fields(limit: int) -> dict[str, Schema]:
    """The fields every OpenAI generation body shares (chat and text completions)."""
    return {
        "model": {
            "type": ["string", "null"],
            "description": "A model of GET /v1/models; the server's default when absent.",
        },
        "stream": {"type": ["boolean", "null"]},
        "stream_options": nullable(obj({"include_usage": {"type": ["boolean", "null"]}})),
        "max_tokens": max_tokens_field(limit),
        "max_completion_tokens": max_tokens_field(limit),
        **sampling_fields(),
        "top_logprobs": {
            **integer(-1, MAX_TOP_LOGPROBS),
            "description": "Alternatives per token, with logprobs; -1 means unset.",
        },
        "n": {
            **integer(1, lab_settings.max_n),
            "description": "Choices to generate from the one prompt, generated side by side.",
        },
        "adapter": {
            "type": ["string", "null"],
            "description": (
                "A finetuned adapter of the model (GET /api/adapters), several joined with '+' "
                "to stack them, or 'none'. Switching adapters never reloads the model."
            ),
        },
        "prompt_cache_key": session_field(),
        "session_id": session_field(mlx_bun_name=True),
        **kv_fields(),
        **draft_fields(),
    }
