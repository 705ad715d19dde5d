"""Session-wide real parts: the default model folder and one live Daphne server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
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


THINKING_MODEL = "smollm2-thinking"

# The lab's staff user on the session server, for the browser tests.
LAB_USER, LAB_PASSWORD = "tester", "tester-password-1"

# The default model's template, with the assistant's turn opening a <think> block.
THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}"
)


def thinking_model_folder(source: Path, models_dir: Path) -> Path:
    """The default model's weights under a chat template that opens a <think> block."""
    folder = models_dir / THINKING_MODEL
    folder.mkdir(parents=True)
    for item in source.iterdir():
        if item.name != "tokenizer_config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config["chat_template"] = THINKING_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
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


def start_daphne(home: Path, env: dict, label: str = "daphne") -> LiveServer:
    """A real Daphne on an ephemeral loopback port; returns once the model is loaded."""
    port = _free_port()
    log_path = home / f"{label}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
             "mlxlab.asgi:application"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path, env)
    try:
        _wait_until_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, model_folder) -> LiveServer:
    """The session's server, with its own database and the default model loaded."""
    home = tmp_path_factory.mktemp("server")
    env = {
        **os.environ,
        "MLXLAB_DB_PATH": str(home / "db.sqlite3"),
        # Imports from the models page land here, not in the checkout's var/models.
        "MLXLAB_MODELS_DIR": str(home / "models"),
        "MLXLAB_DEFAULT_MODEL": DEFAULT_MODEL,
        "MLXLAB_PRELOAD": "1",
    }
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "add_model", str(model_folder), "--name", DEFAULT_MODEL)
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


def _wait_until_ready(server: LiveServer, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"daphne exited early:\n{server.log()}")
        try:
            health = httpx.get(f"{server.url}/health", timeout=2).json()
            if DEFAULT_MODEL in health.get("models_loaded", []):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"daphne did not become ready:\n{server.log()}")
