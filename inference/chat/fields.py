"""The request fields every chat surface names alike: sampling, stop, logprobs, limits.

Each reader takes the body (or any dict with the same field names) and returns the
checked value. Names, defaults and messages follow mlx_lm.server's
`validate_model_parameters`, so clients moving from it see the same 400s; here they
arrive in the surface's own error shape instead of a dropped connection.
"""

from __future__ import annotations

from labsettings import lab_settings

from .. import adapter_registry
from ..errors import ApiError
from ..protocol.sampling import (
    HLG_KNOBS,
    KV_BITS,
    KV_GROUP_SIZES,
    MAX_DRAFT_TOKENS,
    MAX_KV_LAYERS,
    MAX_TOP_LOGPROBS,
    KVLayer,
    hlg_problem,
)

NUMBER = (float, int)


def _type_names(expected) -> str:
    names = tuple(t.__name__ for t in expected) if isinstance(expected, tuple) else None
    return str(names) if names else expected.__name__


def field(body: dict, name: str, expected, default=None, *, low=None, high=None):
    """Read one field, checking its type and range as mlx_lm.server does."""
    value = body.get(name, default)
    if value is None:
        return default
    # bool is an int in Python, never a number on the wire.
    if isinstance(value, bool) and expected is not bool or not isinstance(value, expected):
        raise ApiError(f"{name} must be of type {_type_names(expected)}", param=name)
    if low is not None and value < low:
        raise ApiError(f"{name} must be at least {low}", param=name)
    if high is not None and value > high:
        raise ApiError(f"{name} must be at most {high}", param=name)
    return value


def _logit_bias(body: dict) -> dict[int, float] | None:
    bias = body.get("logit_bias")
    if bias is None:
        return None
    if not isinstance(bias, dict):
        raise ApiError("logit_bias must be a dict of int to float", param="logit_bias")
    if len(bias) > lab_settings.max_logit_bias:
        raise ApiError(
            f"logit_bias may hold at most {lab_settings.max_logit_bias} entries", param="logit_bias"
        )
    try:
        parsed = {int(key): float(value) for key, value in bias.items()}
    except (TypeError, ValueError):
        raise ApiError("logit_bias must be a dict of int to float", param="logit_bias") from None
    if any(not -100 <= value <= 100 for value in parsed.values()):
        raise ApiError("logit_bias values must be between -100 and 100", param="logit_bias")
    return parsed


def check_stop(stop, param: str) -> tuple[str, ...]:
    """A list's strings within the server's count and length bounds. Entries that are not
    strings, and empty ones (they could only match everywhere), are dropped, not refused,
    as mlx-bun drops them."""
    if not isinstance(stop, list):
        raise ApiError(f"{param} must be a string or a list of strings", param=param)
    count, chars = lab_settings.max_stop_sequences, lab_settings.max_stop_chars
    if len(stop) > count:  # as sent: a bound on the body, whatever is dropped
        raise ApiError(f"{param} may hold at most {count} sequences", param=param)
    stop = [s for s in stop if isinstance(s, str) and s]
    if any(len(s) > chars for s in stop):
        raise ApiError(f"each of {param} may be at most {chars} characters long", param=param)
    return tuple(stop)


def stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    return check_stop([stop] if isinstance(stop, str) else stop, "stop")


def n(body: dict) -> int:
    """How many choices to generate from the one prompt (OpenAI's `n`)."""
    return field(body, "n", int, 1, low=1, high=lab_settings.max_n)


def max_tokens(body: dict) -> int | None:
    # max_completion_tokens is the newer name and wins when both are sent.
    newer = field(body, "max_completion_tokens", int, low=1)
    return newer if newer is not None else field(body, "max_tokens", int, low=1)


def include_usage(body: dict) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise ApiError("stream_options must be an object", param="stream_options")
    return bool(field(options, "include_usage", bool, False))


# The seed reaches mx.random.seed, an unsigned 64-bit value (negative ones wrap).
SEED_RANGE = (-(2**63), 2**64 - 1)


def sampling(body: dict) -> dict:
    """Every sampling field, checked; those with a per-model default (sampling_defaults.
    FIELDS) only when the request sets them, the others with mlx_lm.server's default."""
    window = lab_settings.max_penalty_context
    fields = dict(
        temperature=field(body, "temperature", NUMBER, low=0),
        top_p=field(body, "top_p", NUMBER, low=0, high=1),
        top_k=field(body, "top_k", int, low=0),
        min_p=field(body, "min_p", NUMBER, low=0, high=1),
        xtc_probability=field(body, "xtc_probability", NUMBER, 0.0, low=0, high=1),
        # mlx-lm's XTC refuses a threshold over 0.5 mid-generation (a 500), though
        # mlx_lm.server accepts up to 1: refuse it up front instead.
        xtc_threshold=field(body, "xtc_threshold", NUMBER, 0.1, low=0, high=0.5),
        seed=field(body, "seed", int, low=SEED_RANGE[0], high=SEED_RANGE[1]),
        logit_bias=_logit_bias(body),
        repetition_penalty=field(body, "repetition_penalty", NUMBER, low=0),
        repetition_context_size=field(body, "repetition_context_size", int, 20, low=0, high=window),
        presence_penalty=field(body, "presence_penalty", NUMBER, 0.0),
        presence_context_size=field(body, "presence_context_size", int, 20, low=0, high=window),
        frequency_penalty=field(body, "frequency_penalty", NUMBER, 0.0),
        frequency_context_size=field(body, "frequency_context_size", int, 20, low=0, high=window),
        hlg=hlg(body),
    )
    return {name: value for name, value in fields.items() if value is not None}


def hlg(body: dict) -> dict | None:
    """mlx-bun's `hlg` object as sent: the fields it sets (null: unset), checked; the plan
    resolves them over the server's MLXLAB_HLG_SAMPLING (protocol/sampling.resolve_hlg).
    Other fields are ignored, as every parser here ignores what it does not know."""
    value = body.get("hlg")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError("hlg must be an object", param="hlg")
    enabled = value.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise ApiError("hlg.enabled must be of type bool", param="hlg.enabled")
    knobs = {name: value[name] for name in HLG_KNOBS if value.get(name) is not None}
    for name, knob in knobs.items():
        problem = hlg_problem(name, knob)
        if problem:
            raise ApiError(problem, param=f"hlg.{name}")
    return knobs if enabled is None else {"enabled": enabled, **knobs}


def kv_cache(body: dict) -> dict:
    """The KV-cache fields the request set (mlx-lm's `kv_bits`, `kv_group_size`,
    `quantized_kv_start`; mlx-bun's per-layer `kv_config` as `layers`), checked; plan.py
    fills the rest from the defaults. Only the worker knows the model's layers: a kv_config
    of another length is its 400."""
    fields = dict(
        bits=field(body, "kv_bits", int),
        group_size=field(body, "kv_group_size", int),
        start=field(body, "quantized_kv_start", int, low=0),
        layers=kv_config(body.get("kv_config")),
    )
    if fields["bits"] is not None and fields["bits"] not in KV_BITS:
        raise ApiError("kv_bits must be 4 or 8", param="kv_bits")
    if fields["group_size"] is not None and fields["group_size"] not in KV_GROUP_SIZES:
        raise ApiError("kv_group_size must be 32, 64 or 128", param="kv_group_size")
    return {name: value for name, value in fields.items() if value is not None}


KV_CONFIG_USAGE = (
    "kv_config must be a list with one entry per layer: null (plain) or {bits, group_size}"
)


def kv_config(value) -> tuple[KVLayer | None, ...] | None:
    """`kv_config`: each layer's scheme, in the model's order; null keeps a layer plain."""
    if value is None:
        return None
    if not isinstance(value, list) or not 0 < len(value) <= MAX_KV_LAYERS:
        raise ApiError(f"{KV_CONFIG_USAGE} (1 to {MAX_KV_LAYERS} entries)", param="kv_config")
    return tuple(_kv_layer(entry, f"kv_config[{index}]") for index, entry in enumerate(value))


def _kv_layer(entry, where: str) -> KVLayer | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or not entry.keys() <= {"bits", "group_size"}:
        message = f"{where} is not a KV scheme: null (plain) or {{bits, group_size}}"
        raise ApiError(message, param="kv_config")
    bits, group_size = entry.get("bits"), entry.get("group_size", 64)
    if type(bits) is not int or bits not in KV_BITS:  # bool is an int, never bits
        raise ApiError(f"{where}.bits must be 4 or 8", param="kv_config")
    if type(group_size) is not int or group_size not in KV_GROUP_SIZES:
        raise ApiError(f"{where}.group_size must be 32, 64 or 128", param="kv_config")
    return KVLayer(bits, group_size)


DRAFT_METHODS = ("ngram", "none")
MAX_MODEL_NAME = 200  # LanguageModel.name's length


def drafting(body: dict, *, prediction: bool = False) -> dict:
    """Speculative decoding's fields as set: `draft_model` ("ngram": prompt lookup, "none",
    or a registered model's name, which plan.py resolves), mlx_lm.server's
    `num_draft_tokens`, and (chat completions) OpenAI's `prediction`, whose text drafts
    are looked up in first."""
    fields = dict(
        draft_model=field(body, "draft_model", str),
        num_draft_tokens=field(body, "num_draft_tokens", int, low=1, high=MAX_DRAFT_TOKENS),
        prediction=predicted_text(body.get("prediction")) if prediction else None,
    )
    method = fields["draft_model"]
    if method is not None and not 0 < len(method) <= MAX_MODEL_NAME:
        raise ApiError("draft_model must be 'ngram', 'none' or a model's name", param="draft_model")
    return {name: value for name, value in fields.items() if value is not None}


def predicted_text(prediction) -> str | None:
    """OpenAI's `prediction`: {"type": "content", "content": a string or text parts}."""
    if prediction is None:
        return None
    usage = 'prediction must be {"type": "content", "content": <string or text parts>}'
    if not isinstance(prediction, dict) or prediction.get("type") != "content":
        raise ApiError(usage, param="prediction")
    content = prediction.get("content")
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise ApiError(usage, param="prediction")
    return content


def check_logprobs(body: dict) -> tuple[bool, int]:
    """`logprobs` a bool on every surface (mlx_lm.server's rule, not the legacy API's
    count); `top_logprobs` from 0 to 11 (3.0 counts as 3), or -1 for unset."""
    logprobs = field(body, "logprobs", bool, False)
    top = integral(body.get("top_logprobs"))
    if top == -1 and not isinstance(top, bool):
        return logprobs, 0
    top_logprobs = field(
        {"top_logprobs": top}, "top_logprobs", int, 0, low=0, high=MAX_TOP_LOGPROBS
    )
    return logprobs, top_logprobs if logprobs else 0


def integral(value):
    """3.0 as 3: JSON has one number type, and mlx-bun (JavaScript) takes an integral
    float for an integer; anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def model_name(body: dict) -> str | None:
    return field(body, "model", str)


def stream(body: dict) -> bool:
    return field(body, "stream", bool, False)


def adapter(body: dict) -> str | None:
    """The adapter set as sent: checked against the registry when the call is planned."""
    value = body.get("adapter")
    if value is not None and not isinstance(value, str):
        raise ApiError(adapter_registry.USAGE, param="adapter")
    return value


def cache_session(body: dict) -> str | None:
    """mlx-bun's `session_id`, or OpenAI's `prompt_cache_key`: a prompt-cache session."""
    for name in ("session_id", "prompt_cache_key"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not 0 < len(value) <= MAX_SESSION_CHARS:
            raise ApiError(
                f"{name} must be a string of 1 to {MAX_SESSION_CHARS} characters", param=name
            )
        return value
    return None


MAX_SESSION_CHARS = 256
