"""Settings for MLX Lab. Every knob can be set from the environment."""

import os
from pathlib import Path

from corsheaders.defaults import default_headers

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MLXLAB_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


def _env_optional_bool(name: str) -> bool | None:
    value = os.environ.get(name, "").strip()
    return None if not value else _env_bool(name, False)


def _env_number(name: str, kind: type = float) -> float | int | None:
    value = os.environ.get(name, "").strip()
    return kind(value) if value else None


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def _static_key_digests() -> tuple[str, ...]:
    """MLXLAB_API_KEYS, hashed at once: the raw keys never sit in settings or logs."""
    import hashlib

    return tuple(hashlib.sha256(key.encode()).hexdigest() for key in _env_list("MLXLAB_API_KEYS"))


def _path_limits(name: str) -> dict[str, int]:
    """`/v1/messages=1048576,/api/=65536` -> {path prefix: bytes}."""
    pairs = (item.rpartition("=") for item in _env_list(name))
    return {prefix: int(limit) for prefix, _, limit in pairs}


def _secret_key() -> str:
    """A per-installation key, created once with owner-only permissions."""
    if key := os.environ.get("DJANGO_SECRET_KEY"):
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        import secrets

        VAR_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = _env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the API docs page's JS and CSS, served locally (no CDN)
    "corsheaders",
    "channels",
    "inference",
    "lab",
    "jobs",
    "publishing",
    "mlxlab",  # for runlab, which starts the whole lab and so belongs to no one app
]

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",  # first, so every answer carries CORS headers
    "django.middleware.security.SecurityMiddleware",
    "inference.body_limits.BodyLimitMiddleware",  # before anything reads a body
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mlxlab.urls"
ASGI_APPLICATION = "mlxlab.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "jobs.views.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("MLXLAB_DB_PATH", VAR_DIR / "db.sqlite3"),
        "OPTIONS": {"timeout": 20},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# Workers publish job progress here; the job pages' websockets listen.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": "mlxlab"},
    }
}

# Jobs (jobs/): one at a time per worker, each in a fresh child process so a finished
# training run hands its memory back. A job past the soft limit is told to stop and
# cleans up; the hard limit kills it; Redis redelivers an unacknowledged task only
# after the visibility timeout, which is longer than any job may run.
JOB_SOFT_TIME_LIMIT = int(os.environ.get("MLXLAB_JOB_TIME_LIMIT_SECONDS", str(6 * 3600)))
# A running job's process writes a heartbeat this often; the worker's watchdog fails a
# job whose heartbeat is older than JOB_STALE_SECONDS (its process died).
JOB_HEARTBEAT_SECONDS = float(os.environ.get("MLXLAB_JOB_HEARTBEAT_SECONDS", "10"))
JOB_STALE_SECONDS = float(os.environ.get("MLXLAB_JOB_STALE_SECONDS", "45"))
# The web process watches too, so a job outlives no dead worker, restarted or not.
JOB_WATCHDOG_IN_WEB = _env_bool("MLXLAB_JOB_WATCHDOG_IN_WEB", True)
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_CONCURRENCY = 1
CELERY_WORKER_MAX_TASKS_PER_CHILD = 1
CELERY_TASK_SOFT_TIME_LIMIT = JOB_SOFT_TIME_LIMIT
CELERY_TASK_TIME_LIMIT = JOB_SOFT_TIME_LIMIT + 300
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": JOB_SOFT_TIME_LIMIT + 3600}
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("MLXLAB_LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}

# A dataset upload's bytes (jobs/uploads.py), and so the default body limit of its endpoint.
_UPLOAD_BYTES = int(os.environ.get("MLXLAB_MAX_UPLOAD_BYTES", str(64 * 1024 * 1024)))

# The engine's one namespaced setting; defaults live here, the environment overrides.
MLXLAB = {
    "MODELS_DIR": Path(os.environ.get("MLXLAB_MODELS_DIR", VAR_DIR / "models")),
    # Where pushes go: the Hugging Face Hub, or a stand-in speaking its protocol.
    "HF_ENDPOINT": os.environ.get("HF_ENDPOINT", "https://huggingface.co"),
    # How long a push request waits for its upload before answering with the job to poll.
    "PUBLISH_WAIT_SECONDS": int(os.environ.get("MLXLAB_PUBLISH_WAIT_SECONDS", "600")),
    # What jobs make (quantized models, adapters, datasets), one folder per job.
    "ARTIFACTS_DIR": Path(os.environ.get("MLXLAB_ARTIFACTS_DIR", VAR_DIR / "artifacts")),
    "DEFAULT_MODEL": os.environ.get("MLXLAB_DEFAULT_MODEL", "smollm2-135m-instruct"),
    "PRELOAD_DEFAULT_MODEL": _env_bool("MLXLAB_PRELOAD", True),
    # Model workers (inference/workers): how many stay resident, and in how much memory
    # (MB, as the workers report it; 0: no memory bound); idle ones unload after a while.
    "MAX_LOADED_MODELS": int(os.environ.get("MLXLAB_MAX_LOADED_MODELS", "2")),
    "MODEL_MEMORY_MB": int(os.environ.get("MLXLAB_MODEL_MEMORY_MB", "0")),
    "MODEL_IDLE_SECONDS": float(os.environ.get("MLXLAB_MODEL_IDLE_SECONDS", "1800")),
    # How long a request waits for a restarting worker before its 502.
    "ENGINE_WAIT_SECONDS": float(os.environ.get("MLXLAB_ENGINE_WAIT_SECONDS", "30")),
    # How long a worker may take to load its model before it counts as failed.
    "MODEL_LOAD_SECONDS": float(os.environ.get("MLXLAB_MODEL_LOAD_SECONDS", "600")),
    # Worker sockets (ipc://, Unix sockets) live here.
    "WORKER_SOCKET_DIR": Path(os.environ.get("MLXLAB_WORKER_SOCKET_DIR", VAR_DIR / "run")),
    # A chat template render that takes longer than this is a 400.
    "TEMPLATE_RENDER_SECONDS": float(os.environ.get("MLXLAB_TEMPLATE_RENDER_SECONDS", "10")),
    # Sampling defaults for fields a request leaves out (inference/sampling_defaults.py):
    # unset, each comes from the model's generation_config.json, then the fallback.
    **{
        f"DEFAULT_{name}": _env_number(f"MLXLAB_DEFAULT_{name}", int if name == "TOP_K" else float)
        for name in ("TEMPERATURE", "TOP_P", "TOP_K", "MIN_P", "REPETITION_PENALTY")
    },
    # The most a thinking-off turn's default temperature may be (mlx-bun's 0.7).
    "NO_THINK_TEMPERATURE": float(os.environ.get("MLXLAB_NO_THINK_TEMPERATURE", "0.7")),
    # enable_thinking for requests that do not say (1 or 0); unset: the template's own.
    "THINKING": _env_optional_bool("MLXLAB_THINKING"),
    # A cap on the tokens a request that sets no max_tokens generates; unset: a chat runs
    # to the end of its context (at most 65,536), a raw completion stops at 512.
    "DEFAULT_MAX_TOKENS": _env_number("MLXLAB_DEFAULT_MAX_TOKENS", int),
    # An adapter (or "a+b") for requests that name none, on the model it was trained on;
    # a request's "adapter": "none" opts out.
    "DEFAULT_ADAPTER": os.environ.get("MLXLAB_DEFAULT_ADAPTER", "").strip(),
    "MAX_BATCH_SIZE": int(os.environ.get("MLXLAB_MAX_BATCH_SIZE", "8")),
    "PREFILL_STEP_SIZE": int(os.environ.get("MLXLAB_PREFILL_STEP_SIZE", "512")),
    # Stored /v1/responses: kept this long, and at most this many bytes (oldest go first).
    "RESPONSES_TTL_SECONDS": int(os.environ.get("MLXLAB_RESPONSES_TTL_SECONDS", str(30 * 86400))),
    "RESPONSES_MAX_BYTES": int(
        os.environ.get("MLXLAB_RESPONSES_MAX_BYTES", str(256 * 1024 * 1024))
    ),
    "MAX_REQUEST_BYTES": int(os.environ.get("MLXLAB_MAX_REQUEST_BYTES", str(8 * 1024 * 1024))),
    "MAX_UPLOAD_BYTES": _UPLOAD_BYTES,
    # The CPU fast path: OpenBLAS under MLX and dense float32 weights (docs/BENCHMARKS.md).
    # The BLAS itself loads before Django reads settings, so MLXLAB_CPU_FAST_PATH=0,
    # MLXLAB_BLAS_PATH and MLXLAB_BLAS_THREADS (default 1) act through the environment.
    "CPU_FAST_PATH": _env_bool("MLXLAB_CPU_FAST_PATH", True),
    "DENSE_WEIGHT_BUDGET_MB": int(os.environ.get("MLXLAB_DENSE_WEIGHT_BUDGET_MB", "4096")),
    # Reused KV caches of prompt prefixes, per model; 0 entries turns the cache off.
    "PROMPT_CACHE_ENTRIES": int(os.environ.get("MLXLAB_PROMPT_CACHE_ENTRIES", "16")),
    "PROMPT_CACHE_MB": int(os.environ.get("MLXLAB_PROMPT_CACHE_MB", "1024")),
    # user: a caller reuses only its own cached prompts (cached_tokens tells it nothing of
    # others'); global: every caller shares them.
    "PROMPT_CACHE_SCOPE": os.environ.get("MLXLAB_PROMPT_CACHE_SCOPE", "user"),
    # Access control (inference/api_keys.py, inference/api/access.py).
    "STATIC_API_KEY_DIGESTS": _static_key_digests(),
    # The non-staff user static keys act for, created on first use.
    "STATIC_KEY_USER": os.environ.get("MLXLAB_STATIC_KEY_USER", "api-service"),
    # With no API key at all, runlab refuses a non-loopback address unless this is set.
    "ALLOW_OPEN_NETWORK_API": _env_bool("MLXLAB_ALLOW_OPEN_NETWORK_API", False),
    # Browser origins allowed to call the API (CORS); none by default.
    "CORS_ALLOWED_ORIGINS": _env_list("MLXLAB_CORS_ALLOWED_ORIGINS"),
    # Per-path body limits, longest prefix first; MAX_REQUEST_BYTES elsewhere.
    "MAX_REQUEST_BYTES_BY_PATH": {
        "/api/": 1024 * 1024,
        "/api/datasets/uploads": _UPLOAD_BYTES,  # training data files
        **_path_limits("MLXLAB_MAX_REQUEST_BYTES_BY_PATH"),
    },
    # Bounds on what a request may ask of a worker (README: "Limits").
    "MAX_JSON_DEPTH": int(os.environ.get("MLXLAB_MAX_JSON_DEPTH", "64")),
    "MAX_STOP_SEQUENCES": int(os.environ.get("MLXLAB_MAX_STOP_SEQUENCES", "16")),
    "MAX_STOP_CHARS": int(os.environ.get("MLXLAB_MAX_STOP_CHARS", "256")),
    "MAX_LOGIT_BIAS": int(os.environ.get("MLXLAB_MAX_LOGIT_BIAS", "300")),
    "MAX_PENALTY_CONTEXT": int(os.environ.get("MLXLAB_MAX_PENALTY_CONTEXT", "4096")),
    "MAX_TOOLS": int(os.environ.get("MLXLAB_MAX_TOOLS", "128")),
    "MAX_SCHEMA_BYTES": int(os.environ.get("MLXLAB_MAX_SCHEMA_BYTES", str(64 * 1024))),
    "MAX_N": int(os.environ.get("MLXLAB_MAX_N", "8")),
    # 0 turns grammar compilation off: constraints are asked for in a system message.
    "GRAMMAR": _env_bool("MLXLAB_GRAMMAR", True),
    "GRAMMAR_COMPILE_SECONDS": float(os.environ.get("MLXLAB_GRAMMAR_COMPILE_SECONDS", "10")),
    "GRAMMAR_CACHE_MB": int(os.environ.get("MLXLAB_GRAMMAR_CACHE_MB", "256")),
    # The most tokens one request may ask for; 0 means only the context length limits it.
    "MAX_TOKENS_LIMIT": int(os.environ.get("MLXLAB_MAX_TOKENS_LIMIT", "0")),
}
# Our middleware answers oversized bodies with a 413; Django's own check (a 400) never fires first.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(
    [MLXLAB["MAX_REQUEST_BYTES"], *MLXLAB["MAX_REQUEST_BYTES_BY_PATH"].values()]
)

CORS_ALLOWED_ORIGINS = MLXLAB["CORS_ALLOWED_ORIGINS"]
# Headers the OpenAI and Anthropic browser SDKs send, beyond django-cors-headers' defaults.
CORS_ALLOW_HEADERS = (
    *default_headers,
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "openai-organization",
    "openai-project",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
)

REST_FRAMEWORK = {
    # An API key of the user first, so an unauthenticated answer is a 401 with WWW-Authenticate.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "inference.rest.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # enforces CSRF
    ],
    "DEFAULT_PERMISSION_CLASSES": ["inference.rest.permissions.LoggedIn"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["inference.json_body.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "MLX Lab API",
    "DESCRIPTION": (
        "The OpenAI- and Anthropic-compatible inference API (/v1), the status endpoints "
        "and the lab's own REST API (/api)."
    ),
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",  # JSON Schema proper: type lists for nullable fields, const
    "SERVE_INCLUDE_SCHEMA": False,
    # The contract is public: no credentials needed to read it (and a bad one is not a 401).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "inference.openapi.hooks.add_inference_api",
        "publishing.openapi.add_publishing_api",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}
