"""Settings for MLX Lab. Every knob can be set from the environment."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MLXLAB_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


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
    "channels",
    "inference",
    "publishing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("MLXLAB_LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}

# The engine's one namespaced setting; defaults live here, the environment overrides.
MLXLAB = {
    "MODELS_DIR": Path(os.environ.get("MLXLAB_MODELS_DIR", VAR_DIR / "models")),
    "DEFAULT_MODEL": os.environ.get("MLXLAB_DEFAULT_MODEL", "smollm2-135m-instruct"),
    "PRELOAD_DEFAULT_MODEL": _env_bool("MLXLAB_PRELOAD", True),
    "MAX_LOADED_MODELS": int(os.environ.get("MLXLAB_MAX_LOADED_MODELS", "2")),
    "DEFAULT_MAX_TOKENS": int(os.environ.get("MLXLAB_DEFAULT_MAX_TOKENS", "512")),
    "MAX_BATCH_SIZE": int(os.environ.get("MLXLAB_MAX_BATCH_SIZE", "8")),
    "PREFILL_STEP_SIZE": int(os.environ.get("MLXLAB_PREFILL_STEP_SIZE", "512")),
    # Stored /v1/responses: kept this long, and at most this many bytes (oldest go first).
    "RESPONSES_TTL_SECONDS": int(os.environ.get("MLXLAB_RESPONSES_TTL_SECONDS", str(30 * 86400))),
    "RESPONSES_MAX_BYTES": int(
        os.environ.get("MLXLAB_RESPONSES_MAX_BYTES", str(256 * 1024 * 1024))
    ),
    "MAX_REQUEST_BYTES": int(os.environ.get("MLXLAB_MAX_REQUEST_BYTES", str(8 * 1024 * 1024))),
    # The CPU fast path: OpenBLAS under MLX and dense float32 weights (docs/BENCHMARKS.md).
    # The BLAS itself loads before Django reads settings, so MLXLAB_CPU_FAST_PATH=0,
    # MLXLAB_BLAS_PATH and MLXLAB_BLAS_THREADS (default 1) act through the environment.
    "CPU_FAST_PATH": _env_bool("MLXLAB_CPU_FAST_PATH", True),
    "DENSE_WEIGHT_BUDGET_MB": int(os.environ.get("MLXLAB_DENSE_WEIGHT_BUDGET_MB", "4096")),
    # Reused KV caches of prompt prefixes, per model; 0 entries turns the cache off.
    "PROMPT_CACHE_ENTRIES": int(os.environ.get("MLXLAB_PROMPT_CACHE_ENTRIES", "16")),
    "PROMPT_CACHE_MB": int(os.environ.get("MLXLAB_PROMPT_CACHE_MB", "1024")),
}
DATA_UPLOAD_MAX_MEMORY_SIZE = MLXLAB["MAX_REQUEST_BYTES"]
