"""Session-wide real parts: the default model folder and one live Daphne server."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import redis
from django.test.utils import override_settings

from inference.engine.process.startup import prepare_mlx_process
from tests.databases import database_env, drop_created
from tests.embedding_fixtures import embedding_folders, embedding_models  # noqa: F401
from tests.vision_fixtures import *  # noqa: F403 (its session fixtures)

# The tests run the engine in this process: its BLAS goes under MLX before any test module
# imports mlx.core, as in a model worker.
prepare_mlx_process()

ROOT = Path(__file__).resolve().parent.parent
# The suite asserts exact greedy text and bounded lengths: every server it starts (they
# inherit this environment) samples greedily and stops at 512 tokens unless a request
# says otherwise. The model's own defaults are tested with these unset.
TEST_SAMPLING = {"MLXLAB_DEFAULT_TEMPERATURE": "0", "MLXLAB_DEFAULT_MAX_TOKENS": "512"}
for _name, _value in TEST_SAMPLING.items():
    os.environ.setdefault(_name, _value)
# Chromium for the UI and job page tests; evaluations shared by jobs, pages and publishing.
pytest_plugins = ["tests.browser", "tests.evaluations"]
DEFAULT_MODEL = os.environ.get("MLXLAB_DEFAULT_MODEL", "smollm2-135m-instruct")


def default_model_folder() -> Path:
    models_dir = Path(os.environ.get("MLXLAB_MODELS_DIR", ROOT / "var" / "models"))
    folder = models_dir / DEFAULT_MODEL
    if not (folder / "config.json").is_file():
        pytest.fail(f"the default model is not at {folder}: run `make setup` first")
    return folder


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--screenshots",
        action="store_true",
        help="save screenshots of the lab's pages under docs/screenshots/",
    )


@pytest.fixture(scope="session")
def model_folder() -> Path:
    return default_model_folder()


@pytest.fixture(scope="session")
def draft_model_folder(tmp_path_factory, model_folder) -> Path:
    """A lab-made quantized copy of the default model: a draft model with its vocabulary."""
    from tests.draft_models import quantized_copy

    return quantized_copy(model_folder, tmp_path_factory.mktemp("drafts") / DRAFT_MODEL)


@pytest.fixture(scope="session")
def other_vocabulary_folder(tmp_path_factory, model_folder) -> Path:
    """A model whose vocabulary differs from the default model's by one added token."""
    from tests.draft_models import other_vocabulary_copy

    return other_vocabulary_copy(model_folder, tmp_path_factory.mktemp("vocab") / OTHER_VOCAB)


DRAFT_MODEL = "smollm2-draft-q4g64"
OTHER_VOCAB = "smollm2-other-vocab"
THINKING_MODEL = "smollm2-thinking"

# The lab's staff user on the session server, for the browser tests.
LAB_USER, LAB_PASSWORD = "tester", "tester-password-1"

# The default model's template, with the assistant's turn opening a <think> block.
THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}"
)


def with_chat_template(source: Path, folder: Path, template: str) -> Path:
    """The weights of the model at `source` (symlinked) under another chat template."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name != "tokenizer_config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


# The thinking model's own sampling defaults, as a model author publishes them.
THINKING_GENERATION = {"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.9, "top_p": 0.95}


def thinking_model_folder(source: Path, models_dir: Path) -> Path:
    """The default model's weights under a chat template that opens a <think> block,
    with sampling defaults of its own in generation_config.json."""
    folder = with_chat_template(source, models_dir / THINKING_MODEL, THINKING_TEMPLATE)
    (folder / "generation_config.json").unlink()  # a link to the default model's
    (folder / "generation_config.json").write_text(json.dumps(THINKING_GENERATION))
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen
    log_path: Path
    env: dict
    # A staff user's session in the server's database: /stats, /engine and /health's
    # detail are for staff, whether or not the API is open.
    staff_cookies: dict = field(default_factory=dict)

    def staff_client(self, **options) -> httpx.Client:
        """A client that reads the status endpoints as a staff user, with no key (one
        would close an open API for the whole server)."""
        return httpx.Client(base_url=self.url, cookies=self.staff_cookies, **options)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _manage(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


# Run in a server's database: a user (made once; staff or not), and a new session of
# theirs, whose key is printed.
USER_SESSION = """
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
user = User.objects.filter(username={name!r}).first()
user = user or User.objects.create_user({name!r}, is_staff={staff!r})
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(session.session_key)
"""


def user_session(env: dict, name: str = "status-reader", *, staff: bool = True) -> dict[str, str]:
    """The cookies of a new session of user `name` (a staff user who reads status, unless
    told otherwise) in the database of a server started with `env`."""
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", USER_SESSION.format(name=name, staff=staff)],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return {"sessionid": made.stdout.strip().splitlines()[-1]}


def staff_session(env: dict) -> dict[str, str]:
    """The cookies of a new staff session in the database of a server started with `env`."""
    return user_session(env)


def start_daphne(
    home: Path, env: dict, label: str = "daphne", *, wait_for_model: bool = True
) -> LiveServer:
    """A real Daphne (as runlab starts it: mlxlab/httpserver.py) on an ephemeral loopback
    port; returns once it (and its model) is up."""
    port = _free_port()
    log_path = home / f"{label}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlxlab.httpserver", "-b", "127.0.0.1", "-p", str(port),
             "mlxlab.asgi:application"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path, env, staff_session(env))
    try:
        _wait_until_ready(server, DEFAULT_MODEL if wait_for_model else None)
    except BaseException:
        server.stop()
        raise
    return server


# The tests' own Redis database, emptied at the start: stale tasks of an earlier run
# must not reach this run's workers.
TEST_REDIS_URL = os.environ.get("MLXLAB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _start_redis() -> tuple[subprocess.Popen, str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("no Redis answers and redis-server is not installed: apt install redis-server")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        if _listening("127.0.0.1", port):
            return process, f"redis://127.0.0.1:{port}/15"
        time.sleep(0.05)
    process.kill()
    pytest.fail("redis-server did not start")


@pytest.fixture(scope="session", autouse=True)
def test_sampling():
    """TEST_SAMPLING for this process too (its settings were read before this file)."""
    from django.conf import settings

    values = {
        "default_temperature": float(TEST_SAMPLING["MLXLAB_DEFAULT_TEMPERATURE"]),
        "default_max_tokens": int(TEST_SAMPLING["MLXLAB_DEFAULT_MAX_TOKENS"]),
    }
    override = override_settings(MLXLAB=settings.MLXLAB.replace(**values))
    override.enable()
    yield
    override.disable()


@pytest.fixture(scope="session", autouse=True)
def import_roots(test_sampling, tmp_path_factory) -> tuple[Path, ...]:
    """The tests name GGUF files and dataset folders in pytest's temporary folders, and the
    embedded default model's GGUF: those are the import roots here and in every server and
    worker the tests start (they inherit this environment)."""
    from django.conf import settings

    from inference.management.commands.ensure_default_model import embedded_gguf

    roots = (tmp_path_factory.getbasetemp(), embedded_gguf().parent)
    os.environ["MLXLAB_IMPORT_ROOTS"] = os.pathsep.join(str(root) for root in roots)
    override = override_settings(MLXLAB=settings.MLXLAB.replace(import_roots=roots))
    override.enable()
    yield roots
    override.disable()


@pytest.fixture(scope="session", autouse=True)
def _lab_databases():
    """The PostgreSQL databases the session's labs made (none on SQLite), dropped at the end."""
    yield
    drop_created()


@pytest.fixture(scope="session", autouse=True)
def redis_url():
    """A real Redis for Celery and the channel layer: the one on loopback, or our own."""
    url, process = TEST_REDIS_URL, None
    parsed = urlparse(url)
    if not _listening(parsed.hostname or "127.0.0.1", parsed.port or 6379):
        process, url = _start_redis()
    redis.Redis.from_url(url).flushdb()
    os.environ["REDIS_URL"] = url  # for every server and worker the tests start
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": "mlxlab"},
        }
    }
    override = override_settings(
        REDIS_URL=url, CELERY_BROKER_URL=url, CELERY_RESULT_BACKEND=url, CHANNEL_LAYERS=layers
    )
    override.enable()
    from mlxlab.celery import app

    app.conf.broker_url = app.conf.result_backend = url
    try:
        yield url
    finally:
        override.disable()
        if process is not None:
            process.terminate()
            process.wait(10)


def server_home(home: Path, model_folder: Path, **settings: str) -> dict:
    """A server's environment in `home`: its own database (migrated, the default model
    registered), models folder and worker sockets, plus MLXLAB_* `settings`."""
    env = {
        **os.environ,
        **database_env(home),
        # Imports from the models page land here, not in the checkout's var/models.
        "MLXLAB_MODELS_DIR": str(home / "models"),
        "MLXLAB_WORKER_SOCKET_DIR": str(home / "run"),
        # What the model workers keep on disk stays in the lab's home, not the checkout.
        "MLXLAB_PROMPT_CACHE_DIR": str(home / "prompt-cache"),
        "MLXLAB_CHECKPOINT_DIR": str(home / "checkpoints"),
        "MLXLAB_DEFAULT_MODEL": DEFAULT_MODEL,
        "MLXLAB_PRELOAD": "1",
        **{f"MLXLAB_{name}": value for name, value in settings.items()},
    }
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "add_model", str(model_folder), "--name", DEFAULT_MODEL)
    return env


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, model_folder, redis_url) -> LiveServer:
    """The session's server, with its own database and the default model loaded."""
    home = tmp_path_factory.mktemp("server")
    # Image URLs (api/test_image_urls.py): the tests' image server on 127.0.0.1 is the one
    # non-public address it may fetch from, and a sleeping answer times out soon.
    env = server_home(home, model_folder, MEDIA_ALLOW_PRIVATE="127.0.0.1", MEDIA_FETCH_SECONDS="2")
    thinking = thinking_model_folder(model_folder, home / "models")
    _manage(env, "add_model", str(thinking), "--name", THINKING_MODEL)
    user_env = {
        **env,
        "DJANGO_SUPERUSER_USERNAME": LAB_USER,
        "DJANGO_SUPERUSER_PASSWORD": LAB_PASSWORD,
    }
    _manage(user_env, "createsuperuser", "--noinput", "--email", "tester@localhost")
    server = start_daphne(home, env)
    try:
        yield server
    finally:
        server.stop()


def _wait_until_ready(server: LiveServer, model: str | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"daphne exited early:\n{server.log()}")
        try:
            health = httpx.get(
                f"{server.url}/health", cookies=server.staff_cookies, timeout=2
            ).json()
            if model is None or model in health.get("models_loaded", []):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"daphne did not become ready:\n{server.log()}")


@pytest.fixture(scope="session")
def hub():
    """A stand-in for the Hugging Face Hub on loopback, speaking its HTTP protocol."""
    from tests.hub_standin import HubStandIn

    standin = HubStandIn().start()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture(scope="session")
def jobs_lab(tmp_path_factory, model_folder, redis_url, hub):
    """Daphne and a real Celery worker over one database, for the job tests."""
    from tests.live_jobs import start_jobs_lab

    home = tmp_path_factory.mktemp("jobs-lab")
    lab = start_jobs_lab(
        home, model_folder, DEFAULT_MODEL,
        # The stand-in speaks the Hub's HTTP and LFS protocols, not Xet storage; the
        # client's cache (config.json files read by searches) stays in the lab's folder.
        extra_env={"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1",
                   "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(home / "hf-home")},
    )  # fmt: skip
    try:
        yield lab
    finally:
        for client in lab.clients:
            client.close()
        lab.server.stop()
        lab.worker.stop()
