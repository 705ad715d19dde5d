"""The lab's settings: one table, one typed object, read through `lab_settings`.

`LabSettings` is the table. Each field is one setting: its name and type, the
environment variable that sets it, the parser of that variable, its default and what
it means. Its first rows come from the classes it extends: places.py's (where things
live), workers.py's (model workers), then engine.py's (the engine and the native
libraries); the rest are its own. `mlxlab/settings.py` builds it once,
`MLXLAB = LabSettings.from_environ(os.environ)`, and app code reads it typed,
`from labsettings import lab_settings; lab_settings.max_n`.

Code without Django (inference/engine, native/) reads engine.py's rows as
`engine_settings.cpu_fast_path`, parsed from the process environment (proxy.py). The C++
libraries read no variable: the Python that loads one passes it their values.
docs/SETTINGS.md is generated from the table (doc.py).

This package sits below every app and imports none of them, nor any of Django that needs
configured settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .engine import EngineSettings
from .parsers import (
    one_of,
    optional,
    parse_bool,
    parse_float,
    parse_hlg,
    parse_int,
    parse_key_digests,
    parse_kv_bits,
    parse_kv_by_model,
    parse_kv_group_size,
    parse_list,
    parse_networks,
    parse_path_limits,
)
from .places import BASE_DIR as BASE_DIR  # re-exported: callers import it from here
from .proxy import EnvironmentReader, LabSettingsProxy
from .rows import Derived, Setting, rows_of, setting, under_var
from .rows import SettingError as SettingError  # re-exported: what a bad value raises
from .workers import WorkerSettings

MIB = 1024 * 1024


@dataclass(frozen=True)
class LabSettings(EngineSettings, WorkerSettings):
    """Every lab setting, typed. Order matters: a Derived default reads rows above it,
    and the rows of the classes it extends come first (WorkerSettings', then
    EngineSettings')."""

    # Sampling defaults for fields a request leaves out (inference/sampling_defaults.py):
    # unset, each comes from the model's generation_config.json, then the fallback.
    default_temperature: float | None = setting(
        "MLXLAB_DEFAULT_TEMPERATURE", optional(parse_float), None, "The server's temperature."
    )
    default_top_p: float | None = setting(
        "MLXLAB_DEFAULT_TOP_P", optional(parse_float), None, "The server's top_p."
    )
    default_top_k: int | None = setting(
        "MLXLAB_DEFAULT_TOP_K", optional(parse_int), None, "The server's top_k."
    )
    default_min_p: float | None = setting(
        "MLXLAB_DEFAULT_MIN_P", optional(parse_float), None, "The server's min_p."
    )
    default_repetition_penalty: float | None = setting(
        "MLXLAB_DEFAULT_REPETITION_PENALTY", optional(parse_float), None,
        "The server's repetition_penalty.",
    )  # fmt: skip
    no_think_temperature: float = setting(
        "MLXLAB_NO_THINK_TEMPERATURE", parse_float, 0.7,
        "The most a thinking-off turn's default temperature may be, for a model that declares "
        "no cap of its own (mlx-bun's generic 0.7).",
    )  # fmt: skip
    thinking: bool | None = setting(
        "MLXLAB_THINKING", optional(parse_bool), None,
        "enable_thinking for requests that do not say; unset: the model's declared default, "
        "else the template's own.",
    )  # fmt: skip
    # Unset: a chat runs to the end of its context (at most 65,536), a completion to 512.
    default_max_tokens: int | None = setting(
        "MLXLAB_DEFAULT_MAX_TOKENS", optional(parse_int), None,
        "A cap on the tokens of a request that sets no max_tokens.",
    )  # fmt: skip
    # A request's `hlg` fields win over these, field by field (protocol/sampling.resolve_hlg).
    hlg_sampling: dict | None = setting(
        "MLXLAB_HLG_SAMPLING", parse_hlg, None,
        "HLG tone-curve sampling where a request's `hlg` does not say: on; off; knobs, "
        "`width=3,toe=8` (on) or `off,toe=8` (for requests that turn it on); or a JSON object "
        "like a request's `hlg`. Unset: off, knobs 4/4/6/6 (width/shoulder/toe/pivot_offset).",
    )  # fmt: skip
    # The chat page's own start value; the API's default above stays as it is.
    chat_max_tokens: int = setting(
        "MLXLAB_CHAT_MAX_TOKENS", parse_int, 2048,
        "The max tokens the chat page's field starts at (at most the model's context).",
    )  # fmt: skip
    # A request's "adapter": "none" opts out.
    default_adapter: str = setting(
        "MLXLAB_DEFAULT_ADAPTER", str.strip, "",
        'An adapter (or "a+b") for requests that name none, on the model it was trained on.',
    )  # fmt: skip

    prompt_cache_entries: int = setting(
        "MLXLAB_PROMPT_CACHE_ENTRIES", parse_int, 16,
        "Reused KV caches of prompt prefixes, per model; 0 turns the cache off.",
    )  # fmt: skip
    prompt_cache_mb: int = setting(
        "MLXLAB_PROMPT_CACHE_MB", parse_int, 1024, "Bytes of cached KV state per model."
    )
    prompt_cache_sessions: int = setting(
        "MLXLAB_PROMPT_CACHE_SESSIONS", parse_int, 16,
        "Named sessions (session_id, prompt_cache_key) whose last turn is kept, per model.",
    )  # fmt: skip
    prompt_cache_dir: Path = setting(
        "MLXLAB_PROMPT_CACHE_DIR", Path, under_var("prompt-cache"),
        "The prompt cache's disk tier, kept across restarts: a folder per model.",
    )  # fmt: skip
    prompt_cache_disk_mb: int = setting(
        "MLXLAB_PROMPT_CACHE_DISK_MB", parse_int, 4096,
        "Bytes of the disk tier per model, least recently used out first; 0 turns it off.",
    )  # fmt: skip
    # user: cached_tokens tells a caller nothing of others' prompts.
    prompt_cache_scope: str = setting(
        "MLXLAB_PROMPT_CACHE_SCOPE", one_of("user", "global"), "user",
        "user: a caller reuses only its own cached prompts; global: every caller shares them.",
    )  # fmt: skip
    # The KV cache of requests that set no kv_bits (engine/kv_lanes.py): request, then
    # the model's entry in MLXLAB_KV_BY_MODEL, then these.
    kv_bits: int | None = setting(
        "MLXLAB_KV_BITS", optional(parse_kv_bits), None, "4 or 8: a quantized KV cache; 16: none."
    )
    kv_group_size: int = setting(
        "MLXLAB_KV_GROUP_SIZE", parse_kv_group_size, 64, "Its group size: 32, 64 or 128."
    )
    quantized_kv_start: int = setting(
        "MLXLAB_QUANTIZED_KV_START", parse_int, 5000, "Tokens kept unquantized first."
    )
    kv_by_model: dict = setting(
        "MLXLAB_KV_BY_MODEL", parse_kv_by_model, {}, "Per model: NAME=BITS[/GROUP[/START]],..."
    )

    # Resumable generation (inference/engine/caching/checkpoints.py): an identical retry resumes.
    checkpoint_dir: Path = setting(
        "MLXLAB_CHECKPOINT_DIR", Path, under_var("checkpoints"), "Generations' checkpoints."
    )
    checkpoint_every: int = setting(
        "MLXLAB_CHECKPOINT_EVERY", parse_int, 8,
        "Tokens between a generation's checkpoints (and one when interrupted); 0: none.",
    )  # fmt: skip
    checkpoint_mb: int = setting(
        "MLXLAB_CHECKPOINT_MB", parse_int, 64, "Bytes of checkpoints per model, oldest out."
    )
    checkpoint_max_age_seconds: float = setting(
        "MLXLAB_CHECKPOINT_MAX_AGE_SECONDS", parse_float, 86400.0, "A checkpoint kept this long."
    )

    # Stored /v1/responses.
    responses_ttl_seconds: int = setting(
        "MLXLAB_RESPONSES_TTL_SECONDS", parse_int, 30 * 86400, "How long a response is kept."
    )
    responses_max_bytes: int = setting(
        "MLXLAB_RESPONSES_MAX_BYTES", parse_int, 256 * MIB,
        "The most stored responses may take; the oldest go first.",
    )  # fmt: skip

    # Access control (inference/api_keys.py, inference/api/access.py).
    static_api_key_digests: tuple[str, ...] = setting(
        "MLXLAB_API_KEYS", parse_key_digests, (),
        "Static API keys (comma-separated), kept as SHA-256 digests.",
    )  # fmt: skip
    static_key_user: str = setting(
        "MLXLAB_STATIC_KEY_USER", str, "api-service",
        "The non-staff user static keys act for, created on first use.",
    )  # fmt: skip
    allow_open_network_api: bool = setting(
        "MLXLAB_ALLOW_OPEN_NETWORK_API", parse_bool, False,
        "With no API key at all, runlab serves a non-loopback address only if this is set.",
    )  # fmt: skip
    https: bool = setting(
        "MLXLAB_HTTPS", parse_bool, False,
        "Served behind a TLS proxy that sets X-Forwarded-Proto: https only (a redirect), "
        "secure cookies, HSTS for a year (docs/DEPLOY.md).",
    )  # fmt: skip
    metrics_access: str = setting(
        "MLXLAB_METRICS", one_of("staff", "loopback"), "staff",
        "Who may read /metrics: staff (a key or a session), or also any caller on loopback "
        "(a Prometheus on this host; a proxy here must pass the client's address).",
    )  # fmt: skip
    # Rate limits (access/rate_limits.py): a key's or user's own rpm/tpm wins; 0: none.
    rate_limit_rpm: int = setting(
        "MLXLAB_RATE_LIMIT_RPM", parse_int, 0,
        "Requests per minute of a key or user with no limit of its own; 0: no limit.",
    )  # fmt: skip
    rate_limit_tpm: int = setting(
        "MLXLAB_RATE_LIMIT_TPM", parse_int, 0,
        "Tokens (prompt plus completion) per minute likewise; 0: no limit.",
    )  # fmt: skip
    rate_limit_window_seconds: int = setting(
        "MLXLAB_RATE_LIMIT_WINDOW_SECONDS", parse_int, 60,
        "The sliding window the per-minute limits are counted over (60: a minute).",
    )  # fmt: skip
    cors_allowed_origins: tuple[str, ...] = setting(
        "MLXLAB_CORS_ALLOWED_ORIGINS", parse_list, (),
        "Browser origins allowed to call the API (comma-separated).",
    )  # fmt: skip
    # Login throttling (django-axes, mlxlab/settings.py): by username and address together.
    login_failure_limit: int = setting(
        "MLXLAB_LOGIN_FAILURE_LIMIT", parse_int, 5,
        "Failed logins of one username from one address before that pair is locked out.",
    )  # fmt: skip
    login_lockout_seconds: int = setting(
        "MLXLAB_LOGIN_LOCKOUT_SECONDS", parse_int, 900,
        "How long such a lockout lasts; the admin site can lift it sooner.",
    )  # fmt: skip

    # Bounds on what a request may ask (docs/API.md, "Limits").
    max_request_bytes: int = setting(
        "MLXLAB_MAX_REQUEST_BYTES", parse_int, 8 * MIB,
        "A request body's bytes, where no path prefix has its own limit.",
    )  # fmt: skip
    max_upload_bytes: int = setting(
        "MLXLAB_MAX_UPLOAD_BYTES", parse_int, 64 * MIB,
        "A dataset upload's bytes; also the default body limit of its endpoint.",
    )  # fmt: skip
    # Longest prefix first (inference/body_limits.py); the variable's pairs add to these.
    max_request_bytes_by_path: dict[str, int] = setting(
        "MLXLAB_MAX_REQUEST_BYTES_BY_PATH", parse_path_limits,
        Derived(
            lambda values: {"/api/": MIB, "/api/datasets/uploads": values["max_upload_bytes"]},
            "/api/=1048576, /api/datasets/uploads=max_upload_bytes",
        ),
        "Body limits per path prefix: /v1/messages=1048576,/api/=65536.",
        merge=True,
    )  # fmt: skip
    # The HTTP server's clocks (mlxlab/http_limits.py): a client that dawdles holds no
    # connection (slowloris). Headers are small, a body may be an upload: two clocks.
    request_header_seconds: float = setting(
        "MLXLAB_REQUEST_HEADER_SECONDS", parse_float, 30.0,
        "A request's line and headers arrive within this, counted from the connection's start "
        "or its previous answer, or the connection is closed (a 408 once a request began); "
        "0: no limit.",
    )  # fmt: skip
    request_body_seconds: float = setting(
        "MLXLAB_REQUEST_BODY_SECONDS", parse_float, 120.0,
        "A request's whole body arrives within this of its headers, or it is answered 408 "
        "and the connection closed; 0: no limit.",
    )  # fmt: skip
    max_json_depth: int = setting("MLXLAB_MAX_JSON_DEPTH", parse_int, 64, "Nesting of a JSON body.")
    max_stop_sequences: int = setting(
        "MLXLAB_MAX_STOP_SEQUENCES", parse_int, 16, "Stop strings per request."
    )
    max_stop_chars: int = setting(
        "MLXLAB_MAX_STOP_CHARS", parse_int, 256, "Characters per stop string."
    )
    max_logit_bias: int = setting("MLXLAB_MAX_LOGIT_BIAS", parse_int, 300, "Entries of logit_bias.")
    max_penalty_context: int = setting(
        "MLXLAB_MAX_PENALTY_CONTEXT", parse_int, 4096, "A penalty's context window, in tokens."
    )
    max_tools: int = setting("MLXLAB_MAX_TOOLS", parse_int, 128, "Tools per request.")
    max_schema_bytes: int = setting(
        "MLXLAB_MAX_SCHEMA_BYTES", parse_int, 64 * 1024,
        "A JSON schema, regex, grammar or choice list, in bytes.",
    )  # fmt: skip
    # Media in chat messages (inference/media/): what one request may bring, and what an
    # image URL may cost the web process to fetch (issue 49).
    max_images: int = setting(
        "MLXLAB_MAX_IMAGES", parse_int, 16, "Images per request, sent or fetched."
    )
    max_image_pixels: int = setting(
        "MLXLAB_MAX_IMAGE_PIXELS", parse_int, 4096 * 4096, "Pixels (width x height) per image."
    )
    max_image_bytes: int = setting(
        "MLXLAB_MAX_IMAGE_BYTES", parse_int, 10 * MIB,
        "Bytes per image; a fetch is stopped once past it.",
    )  # fmt: skip
    media_fetch_seconds: float = setting(
        "MLXLAB_MEDIA_FETCH_SECONDS", parse_float, 10.0,
        "The whole fetch of one image URL (every redirect, the name's lookup, the body).",
    )  # fmt: skip
    media_allow_private: tuple[str, ...] = setting(
        "MLXLAB_MEDIA_ALLOW_PRIVATE", parse_networks, (),
        "Image URLs may reach private, loopback, link-local, multicast or reserved addresses: "
        "off (none), on (all), or these addresses and networks (10.1.2.0/24,fd00::/8).",
    )  # fmt: skip
    max_audio_seconds: float = setting(
        "MLXLAB_MAX_AUDIO_SECONDS", parse_float, 300.0,
        "Seconds per audio input (a longer clip is a 400).",
    )  # fmt: skip
    max_n: int = setting("MLXLAB_MAX_N", parse_int, 8, "Choices per prompt (n).")
    max_tokens_limit: int = setting(
        "MLXLAB_MAX_TOKENS_LIMIT", parse_int, 0,
        "The most tokens one request may ask for; 0: only the context length limits it.",
    )  # fmt: skip
    # /v1/embeddings, as OpenAI bounds it: 2,048 inputs, 8,192 tokens each (the model's
    # context bounds an input too).
    embedding_max_inputs: int = setting(
        "MLXLAB_EMBEDDING_MAX_INPUTS", parse_int, 2048, "Inputs of one embeddings request."
    )
    embedding_max_input_tokens: int = setting(
        "MLXLAB_EMBEDDING_MAX_INPUT_TOKENS", parse_int, 8192,
        "Tokens of one embeddings input; an input beyond this or its model's context is a 400.",
    )  # fmt: skip
    grammar: bool = setting(
        "MLXLAB_GRAMMAR", parse_bool, True,
        "Compile grammars; off, constraints are asked for in a system message.",
    )  # fmt: skip
    fill: str = setting(
        "MLXLAB_FILL", one_of("off", "strict", "echo"), "off",
        "Tool-call fast-forwarding: strict drafts what the template and schema fix; echo also copies the prompt.",
    )  # fmt: skip
    grammar_compile_seconds: float = setting(
        "MLXLAB_GRAMMAR_COMPILE_SECONDS", parse_float, 10.0, "Time to compile one grammar."
    )
    grammar_cache_mb: int = setting(
        "MLXLAB_GRAMMAR_CACHE_MB", parse_int, 256, "Compiled grammars kept, per worker."
    )

    # Jobs (jobs/). The soft limit tells a job to stop and clean up; Celery's hard limit
    # and Redis's visibility timeout are derived from it (mlxlab/settings.py).
    job_time_limit_seconds: int = setting(
        "MLXLAB_JOB_TIME_LIMIT_SECONDS", parse_int, 6 * 3600, "A job's soft time limit."
    )
    job_heartbeat_seconds: float = setting(
        "MLXLAB_JOB_HEARTBEAT_SECONDS", parse_float, 10.0,
        "How often a running job's process writes its heartbeat.",
    )  # fmt: skip
    job_stale_seconds: float = setting(
        "MLXLAB_JOB_STALE_SECONDS", parse_float, 45.0,
        "The watchdogs fail a job whose heartbeat is older (its process died).",
    )  # fmt: skip
    # So a job outlives no dead worker, restarted or not.
    job_watchdog_in_web: bool = setting(
        "MLXLAB_JOB_WATCHDOG_IN_WEB", parse_bool, True, "The web process watches jobs too."
    )

    # Publishing (publishing/).
    hf_endpoint: str = setting(
        "HF_ENDPOINT", str, "https://huggingface.co",
        "Where pushes go: the Hugging Face Hub, or a stand-in speaking its protocol.",
    )  # fmt: skip
    hf_token_key: str = setting(
        "MLXLAB_HF_TOKEN_KEY", str, "",
        "The Fernet key of the stored Hub token; empty: a key file in var_dir.",
        secret=True,
    )  # fmt: skip
    publish_wait_seconds: int = setting(
        "MLXLAB_PUBLISH_WAIT_SECONDS", parse_int, 600,
        "How long a push request waits for its upload before answering with the job.",
    )  # fmt: skip


TABLE: tuple[Setting, ...] = rows_of(LabSettings)


# Typed as what they stand for, so that `lab_settings.max_n` is an int to a type checker.
lab_settings: LabSettings = LabSettingsProxy()  # type: ignore[assignment]
engine_settings: EngineSettings = EnvironmentReader(EngineSettings)  # type: ignore[assignment]
