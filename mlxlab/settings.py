"""Settings for MLX Lab. Every knob can be set from the environment."""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from corsheaders.defaults import default_headers
from csp.constants import NONE, SELF
from pythonjsonlogger.core import RESERVED_ATTRS

from labsettings import LabSettings

BASE_DIR = Path(__file__).resolve().parent.parent

# The lab's own settings, one typed object (labsettings/ holds the table of them: each
# one's variable, default and meaning); app code reads it as `labsettings.lab_settings`.
MLXLAB = LabSettings.from_environ(os.environ)
VAR_DIR = MLXLAB.var_dir


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
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the API docs page's JS and CSS, served locally (no CDN)
    "corsheaders",
    "channels",
    "axes",  # login throttling: failed attempts and lockouts, listed in the admin
    "access",  # API keys and the shared /api plumbing; the apps below build on it
    "inference",
    "lab",
    "jobs",
    "publishing",
    "mlxlab",  # for runlab, which starts the whole lab and so belongs to no one app
]

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",  # first, so every answer carries CORS headers
    # One synchronous chain, entered with one thread switch (mlxlab/asgi_handler.py).
    "django.middleware.security.SecurityMiddleware",
    "inference.body_limits.BodyLimitMiddleware",  # before anything reads a body
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: turns a lockout into a 429
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

# A team's database: DATABASE_URL (postgresql://user:password@host:5432/name, parsed by
# dj-database-url), served through psycopg 3. Unset, the embedded SQLite file under var/.
# A connection is kept for a while (CONN_MAX_AGE) on each of the web's kept request threads
# (mlxlab/asgi_handler.py), and between a Celery worker's tasks.
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
conn_max_age = 300  # seconds
if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=conn_max_age, conn_health_checks=True
        )
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": MLXLAB.db_path,
            "CONN_MAX_AGE": conn_max_age,
            # WAL: readers (the web pages) never wait on a writer (a job's progress).
            # IMMEDIATE: a transaction that reads and then writes takes the write lock
            # at BEGIN and waits its turn; a deferred one would fail at once with
            # "database is locked" when another process wrote in between.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: it refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Locked out is a username from one address, never the username everywhere: a stranger
# who guesses at `admin` locks out only their own address, and only for the cool-off.
# The admin site lists lockouts ("Access attempts"); `manage.py axes_reset` clears them.
AXES_FAILURE_LIMIT = MLXLAB.login_failure_limit
AXES_COOLOFF_TIME = timedelta(seconds=MLXLAB.login_lockout_seconds)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The address is the connection's (REMOTE_ADDR), never a header a client may forge; behind
# a reverse proxy, Daphne's --proxy-headers sets it from the proxy's X-Forwarded-For.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

# The lab's pages run only their own files: no inline script, no other origin. Styles too
# need no 'unsafe-inline': no template has a style attribute, and the scripts set sizes
# through element.style, which a policy does not govern. The favicon is a data: URL; the
# chat's websocket is same-origin, which 'self' covers (CSP level 3), as it covers the chat's
# audio players (media-src falls back to default-src): they play the lab's own URLs only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Behind a TLS proxy (docs/DEPLOY.md): the proxy says a request came over HTTPS in
# X-Forwarded-Proto, and the lab then redirects plain HTTP, sends its cookies over HTTPS only
# and tells browsers to keep to HTTPS for a year. `manage.py check --deploy` is clean so.
if MLXLAB.https:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

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
JOB_SOFT_TIME_LIMIT = MLXLAB.job_time_limit_seconds
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

# Every line carries the request it was written for (inference/request_ids.py). JSON lines come
# from python-json-logger: a formatter for the standard library's logging, so every
# logger (Django's, Celery's, ours) writes them unchanged, where structlog would ask every
# call site for its own API.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "inference.request_ids.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(request)s: %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            "reserved_attrs": [*RESERVED_ATTRS, "request"],
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": MLXLAB.log_format,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": MLXLAB.log_level},
    # django-axes says at every start which lockout it applies; its lockouts still log.
    # httpx2 logs each request's URL at INFO: an image URL's query may hold a secret.
    "loggers": {
        "django.request": {"level": "ERROR"},
        "axes.apps": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

# Our middleware answers oversized bodies with a 413; Django's own check (a 400) never fires first.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(
    [MLXLAB.max_request_bytes, *MLXLAB.max_request_bytes_by_path.values()]
)

CORS_ALLOWED_ORIGINS = list(MLXLAB.cors_allowed_origins)
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
        "access.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # enforces CSRF
    ],
    "DEFAULT_PERMISSION_CLASSES": ["access.permissions.LoggedIn"],
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
    # Behind login as the rest of /api is: a key or a session (REST_FRAMEWORK's classes).
    "SERVE_PERMISSIONS": ["access.permissions.LoggedIn"],
    "SERVE_AUTHENTICATION": None,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "inference.openapi.hooks.add_inference_api",
        "publishing.openapi.add_publishing_api",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}
