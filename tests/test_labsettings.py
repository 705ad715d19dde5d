"""The settings table (labsettings/): every variable parses into its typed attribute, a
bad value names its variable, the defaults are the documented ones, `lab_settings`
follows an override, `engine_settings` follows the environment, docs/SETTINGS.md is the
table's, and the engine and native/ read no variable of ours but through the table."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import labsettings
from labsettings import (
    BASE_DIR,
    TABLE,
    EngineSettings,
    LabSettings,
    SettingError,
    engine_settings,
    lab_settings,
)
from labsettings.doc import COMMAND, markdown
from labsettings.rows import rows_of

ROWS = {row.name: row for row in TABLE}
TYPES = {field.name: field.type for field in dataclasses.fields(LabSettings)}
MIB = 1024 * 1024
DEFAULTS = LabSettings.from_environ({})


def sample(name: str) -> tuple[str, object]:
    """A value for the row's variable other than its default, and what it parses to."""
    kind = TYPES[name]
    special = {
        "prompt_cache_scope": ("global", "global"),
        "warm_up": ("on", "on"),
        "cpu_weights": ("dense", "dense"),
        "default_adapter": ("  house+style ", "house+style"),
        "static_api_key_digests": (
            "key-one, key-two",
            tuple(hashlib.sha256(key).hexdigest() for key in (b"key-one", b"key-two")),
        ),
        "max_request_bytes_by_path": (
            "/v1/messages=1000,/api/=2000",
            {"/api/": 2000, "/api/datasets/uploads": 64 * MIB, "/v1/messages": 1000},
        ),
    }
    special["workers"] = (
        "big=tcp://127.0.0.1:7001, small=ipc:///run/small.sock",
        {"big": ("tcp://127.0.0.1:7001",), "small": ("ipc:///run/small.sock",)},
    )
    special["model_replicas"] = ("big=2, small=0", {"big": 2, "small": 0})
    special["replica_routing"] = ("round_robin", "round_robin")
    special["draft_workers"] = ("inline", "inline")
    special["worker_secret"] = (" a-secret-of-24-characters ", "a-secret-of-24-characters")
    special["import_roots"] = (
        "/srv/lab/imports: :/data/ggufs",
        (Path("/srv/lab/imports"), Path("/data/ggufs")),
    )
    special["kv_bits"] = ("4", 4)
    special["kv_group_size"] = ("32", 32)
    special["kv_by_model"] = (
        "big=4/32/0, small=16",
        {"big": {"bits": 4, "group_size": 32, "start": 0}, "small": {"bits": None}},
    )
    special["fused_projections"] = (" Force", "force")
    special["compiled_mlp"] = ("force", "force")
    special["decode_kernels"] = ("all", "all")
    special["cuda_decode"] = ("reference", "reference")
    special["cuda_decode_replay"] = ("launched", "launched")
    special["log_format"] = ("json", "json")
    special["metrics_access"] = ("loopback", "loopback")
    special["hlg_sampling"] = ("off, toe=8", {"enabled": False, "toe": 8.0})
    special["fill"] = ("echo", "echo")
    special["media_allow_private"] = ("10.1.2.3, ,fd00::/8", ("10.1.2.3/32", "fd00::/8"))
    if name in special:
        return special[name]
    if kind in ("int", "int | None"):
        return "7", 7
    if kind in ("float", "float | None"):
        return "2.5", 2.5
    if kind == "bool":
        return ("0", False) if getattr(DEFAULTS, name) else ("yes", True)
    if kind == "bool | None":
        return "off", False
    if kind == "Path":
        return "/srv/lab/elsewhere", Path("/srv/lab/elsewhere")
    if kind == "str":
        return "some-value", "some-value"
    if kind == "str | None":
        return "/srv/lab/lib.so", "/srv/lab/lib.so"
    if kind == "tuple[str, ...]":
        return "https://a.example, ,https://b.example", ("https://a.example", "https://b.example")
    pytest.fail(f"no sample for {name}: {kind}")


@pytest.mark.parametrize("name", ROWS)
def test_every_variable_sets_its_attribute(name):
    row = ROWS[name]
    text, expected = sample(name)
    assert getattr(DEFAULTS, name) != expected  # so the assertion below can fail
    assert getattr(LabSettings.from_environ({row.env: text}), name) == expected


NUMBERS = [name for name, kind in TYPES.items() if kind.split(" |")[0] in ("int", "float")]


@pytest.mark.parametrize("name", NUMBERS)
def test_a_bad_number_names_its_variable(name):
    env = ROWS[name].env
    with pytest.raises(
        ImproperlyConfigured, match=rf"^{env}: not an? (integer|number) \(got '12x'\)$"
    ):
        LabSettings.from_environ({env: "12x"})


@pytest.mark.parametrize(
    ("env", "text", "why"),
    [
        ("MLXLAB_PRELOAD", "maybe", "not a boolean"),
        ("MLXLAB_THINKING", "sometimes", "not a boolean"),
        ("MLXLAB_PROMPT_CACHE_SCOPE", "everyone", "must be one of user, global"),
        (
            "MLXLAB_MAX_REQUEST_BYTES_BY_PATH",
            "/v1/=1000,nonsense",
            "'nonsense' is not PREFIX=BYTES",
        ),
        ("MLXLAB_MAX_REQUEST_BYTES_BY_PATH", "/v1/=lots", "not an integer"),
        ("MLXLAB_KV_BITS", "2", "must be 4, 8 or 16 (got '2')"),
        ("MLXLAB_KV_GROUP_SIZE", "48", "must be 32, 64 or 128 (got '48')"),
        ("MLXLAB_KV_BY_MODEL", "big=4/64/0/9", "'big=4/64/0/9' is not MODEL=BITS"),
        ("MLXLAB_KV_BY_MODEL", "big=4/64/-1", "'big=4/64/-1': the start must be at least 0"),
        ("MLXLAB_WORKERS", "big", "'big' is not MODEL=tcp://HOST:PORT"),
        ("MLXLAB_WORKERS", "big=http://gpu1:80", "'http://gpu1:80' is not tcp://HOST:PORT"),
        ("MLXLAB_WORKERS", "big=tcp://gpu1", "'tcp://gpu1' is not tcp://HOST:PORT"),
        ("MLXLAB_WORKERS", "big=ipc:///a,big=ipc:///a", "big=ipc:///a is named twice"),
        ("MLXLAB_MODEL_REPLICAS", "big", "'big' is not MODEL=N"),
        ("MLXLAB_MODEL_REPLICAS", "big=-1", "'big=-1' is not MODEL=N"),
        ("MLXLAB_MODEL_REPLICAS", "big=65", "'big=65': from 0 to 64 replicas"),
        ("MLXLAB_WORKER_SECRET", "short", "at least 16 characters"),
        ("MLXLAB_QMM_AVX512", "maybe", "not a boolean"),
        ("MLXLAB_CUDA_DECODE", "sometimes", "must be on, off or one of reference (got"),
        ("MLXLAB_CUDA_DECODE_REPLAY", "sometimes", "must be one of launched, captured, kept"),
        ("MLXLAB_HLG_SAMPLING", "sometimes", "not a boolean"),
        ("MLXLAB_HLG_SAMPLING", "width=-1", "width must be between 0 and 1000"),
        ("MLXLAB_HLG_SAMPLING", "toe=0", "toe must be between 0.01 and 1000"),
        ("MLXLAB_HLG_SAMPLING", "wide=3", "'wide' is none of enabled, width, shoulder"),
        ("MLXLAB_HLG_SAMPLING", "shoulder=lots", "not a number"),
        ("MLXLAB_HLG_SAMPLING", '{"width": "3"}', "width is not a number"),
        ("MLXLAB_HLG_SAMPLING", "[3]", "not a boolean"),
        ("MLXLAB_HLG_SAMPLING", "{3}", "not a JSON object"),
    ],
)
def test_other_bad_values_name_their_variable(env, text, why):
    with pytest.raises(ImproperlyConfigured) as raised:
        LabSettings.from_environ({env: text})
    assert str(raised.value).startswith(f"{env}: {why}")


def test_a_worker_beyond_loopback_needs_the_secret():
    """Never an open port that runs generations for anyone: the web tier refuses to start."""
    for address in ("tcp://10.0.0.5:7001", "tcp://gpu1:7001", "tcp://[2001:db8::1]:7001"):
        with pytest.raises(ImproperlyConfigured) as raised:
            LabSettings.from_environ({"MLXLAB_WORKERS": f"big={address}"})
        assert str(raised.value).startswith(f"MLXLAB_WORKERS: {address} is beyond loopback")
    for address in ("tcp://127.0.0.1:7001", "tcp://localhost:7001", "ipc:///run/w.sock"):
        assert LabSettings.from_environ({"MLXLAB_WORKERS": f"big={address}"}).workers
    secret = {"MLXLAB_WORKER_SECRET": "s" * 16, "MLXLAB_WORKERS": "big=tcp://gpu1:7001"}
    assert LabSettings.from_environ(secret).workers == {"big": ("tcp://gpu1:7001",)}
    secret["MLXLAB_WORKERS"] = "big=tcp://gpu1:7001, big=tcp://gpu2:7001"
    assert LabSettings.from_environ(secret).workers == {
        "big": ("tcp://gpu1:7001", "tcp://gpu2:7001")
    }


def test_blank_values():
    """Unset optional settings are blank; a blank switch is off, as it always was."""
    blank = LabSettings.from_environ(
        {"MLXLAB_DEFAULT_TEMPERATURE": " ", "MLXLAB_THINKING": "", "MLXLAB_PRELOAD": ""}
    )
    assert blank.default_temperature is None and blank.thinking is None
    assert blank.preload_default_model is False
    engine = EngineSettings.from_environ(
        {"MLXLAB_CUDA_DECODE": "", "MLXLAB_BLAS_PATH": "", "MLXLAB_QMM_LIBRARY": ""}
    )
    assert engine.cuda_decode == "off" and engine.blas_path is None
    assert engine.qmm_library == ""  # a blank library is none at all, not make setup's


def test_switches_take_any_boolean_and_their_kinds():
    for text, mode in [("1", "on"), ("Yes", "on"), ("off", "off"), ("0", "off"), ("qkv", "qkv")]:
        assert EngineSettings.from_environ({"MLXLAB_DECODE_KERNELS": text}).decode_kernels == mode


def test_the_documented_defaults():
    var = BASE_DIR / "var"
    documented = {
        "var_dir": var,
        "db_path": var / "db.sqlite3",
        "models_dir": var / "models",
        "artifacts_dir": var / "artifacts",
        "uploads_dir": var / "uploads",
        "import_roots": (var / "imports",),
        "worker_socket_dir": var / "run",
        "log_level": "INFO",
        "log_format": "plain",
        "default_model": "smollm2-135m-instruct",
        "preload_default_model": True,
        "max_loaded_models": 2,
        "model_memory_mb": 0,
        "model_idle_seconds": 1800,
        "engine_wait_seconds": 30,
        "model_load_seconds": 600,
        "template_render_seconds": 10,
        "max_batch_size": 8,
        "prefill_step_size": 512,
        "embedding_batch_tokens": 16384,
        "warm_up": "auto",
        "kernel_cache_dir": var / "kernels",
        "workers": {},
        "model_replicas": {},
        "replica_routing": "cache",
        "draft_workers": "companion",
        "replica_imbalance": 8,
        "worker_secret": "",
        "worker_link_timeout_seconds": 6,
        "default_temperature": None,
        "default_top_p": None,
        "default_top_k": None,
        "default_min_p": None,
        "default_repetition_penalty": None,
        "no_think_temperature": 0.7,
        "thinking": None,
        "default_max_tokens": None,
        "hlg_sampling": None,
        "chat_max_tokens": 2048,
        "default_adapter": "",
        "cpu_fast_path": True,
        "blas_path": None,
        "blas_threads": 1,
        "dense_weight_budget_mb": 4096,
        "cpu_weights": "auto",
        "qmm_library": None,
        "qmm_threads": 0,
        "qmm_spin_us": 200,
        "qmm_parallel_min": 65536,
        "qmm_avx512": True,
        "qmm_int8": False,
        "qmm_int16": False,
        "fused_decode": True,
        "fused_kv_float16": True,
        "fused_projections": "on",
        "decode_kernels": "off",
        "compiled_mlp": "off",
        "compiled_mlp_min_batch": 8,
        "cuda_decode": "on",
        "cuda_decode_max_batch": 64,
        "cuda_decode_replay": "kept",
        "cuda_decode_library": None,
        "cuda_archs": "native",
        "prompt_cache_entries": 16,
        "prompt_cache_mb": 1024,
        "prompt_cache_sessions": 16,
        "prompt_cache_dir": var / "prompt-cache",
        "prompt_cache_disk_mb": 4096,
        "prompt_cache_scope": "user",
        "kv_bits": None,
        "kv_group_size": 64,
        "quantized_kv_start": 5000,
        "kv_by_model": {},
        "checkpoint_dir": var / "checkpoints",
        "checkpoint_every": 8,
        "checkpoint_mb": 64,
        "checkpoint_max_age_seconds": 86400,
        "responses_ttl_seconds": 30 * 86400,
        "responses_max_bytes": 256 * MIB,
        "static_api_key_digests": (),
        "static_key_user": "api-service",
        "allow_open_network_api": False,
        "https": False,
        "rate_limit_rpm": 0,
        "rate_limit_tpm": 0,
        "rate_limit_window_seconds": 60,
        "metrics_access": "staff",
        "cors_allowed_origins": (),
        "login_failure_limit": 5,
        "login_lockout_seconds": 900,
        "max_request_bytes": 8 * MIB,
        "max_upload_bytes": 64 * MIB,
        "max_request_bytes_by_path": {"/api/": MIB, "/api/datasets/uploads": 64 * MIB},
        "request_header_seconds": 30,
        "request_body_seconds": 120,
        "max_json_depth": 64,
        "max_stop_sequences": 16,
        "max_stop_chars": 256,
        "max_logit_bias": 300,
        "max_penalty_context": 4096,
        "max_tools": 128,
        "max_schema_bytes": 64 * 1024,
        "max_n": 8,
        "max_images": 16,
        "max_image_pixels": 4096 * 4096,
        "max_image_bytes": 10 * MIB,
        "media_fetch_seconds": 10,
        "media_allow_private": (),
        "max_audio_seconds": 300,
        "max_tokens_limit": 0,
        "embedding_max_inputs": 2048,
        "embedding_max_input_tokens": 8192,
        "grammar": True,
        "grammar_compile_seconds": 10,
        "grammar_cache_mb": 256,
        "fill": "off",
        "job_time_limit_seconds": 6 * 3600,
        "job_heartbeat_seconds": 10,
        "job_stale_seconds": 45,
        "job_watchdog_in_web": True,
        "hf_endpoint": "https://huggingface.co",
        "hf_token_key": "",
        "publish_wait_seconds": 600,
    }
    assert dataclasses.asdict(DEFAULTS) == documented


def test_the_defaults_are_the_tables_and_of_their_types():
    hints = typing.get_type_hints(LabSettings)
    resolved: dict = {}
    for row in TABLE:
        resolved[row.name] = row.default_for(resolved)
        value = getattr(DEFAULTS, row.name)
        assert value == resolved[row.name], row.name
        kind = hints[row.name]
        kinds = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
        assert isinstance(value, tuple(typing.get_origin(k) or k for k in kinds)), row.name
        assert not isinstance(value, bool) or bool in kinds, row.name


def test_derived_defaults_follow_what_they_derive_from():
    moved = LabSettings.from_environ({"MLXLAB_VAR_DIR": "/srv/lab", "MLXLAB_DB_PATH": "/db"})
    assert moved.models_dir == Path("/srv/lab/models")
    assert moved.artifacts_dir == Path("/srv/lab/artifacts")
    assert moved.worker_socket_dir == Path("/srv/lab/run")
    assert moved.uploads_dir == Path("/srv/lab/uploads")
    assert moved.db_path == Path("/db")  # set, so not derived
    bigger = LabSettings.from_environ({"MLXLAB_MAX_UPLOAD_BYTES": str(100 * MIB)})
    assert bigger.max_request_bytes_by_path["/api/datasets/uploads"] == 100 * MIB
    both = LabSettings.from_environ(
        {"MLXLAB_MAX_UPLOAD_BYTES": "5", "MLXLAB_MAX_REQUEST_BYTES_BY_PATH": "/api/datasets/=9"}
    )
    assert both.max_request_bytes_by_path == {
        "/api/": MIB,
        "/api/datasets/uploads": 5,
        "/api/datasets/": 9,
    }


def test_the_table():
    envs = [row.env for row in TABLE]
    assert len(set(envs)) == len(envs)
    assert all(env.startswith("MLXLAB_") for env in envs if env != "HF_ENDPOINT")
    for row in TABLE:
        assert row.meaning.strip() and "\n" not in row.meaning, row.name
    # The engine's rows are the table's, the BLAS's (read before Django starts) among them.
    engine = [row.env for row in rows_of(EngineSettings)]
    assert {"MLXLAB_BLAS_PATH", "MLXLAB_BLAS_THREADS", "MLXLAB_QMM_SPIN_US"} <= set(engine)
    assert engine == envs[envs.index(engine[0]) :][: len(engine)]


def test_docs_settings_is_the_tables():
    """docs/SETTINGS.md is written from the table, every variable in it, no secret shown."""
    written = (BASE_DIR / "docs" / "SETTINGS.md").read_text()
    if written != markdown():
        pytest.fail(f"docs/SETTINGS.md is not the table's: run `{COMMAND}`", pytrace=False)
    lines = {
        row.env: line for row in TABLE for line in written.splitlines() if f"`{row.env}`" in line
    }
    assert sorted(lines) == sorted(row.env for row in TABLE)
    for row in TABLE:
        shown = lines[row.env].split(" | ")[2]
        assert (shown == "*secret*") == row.secret, row.env


def test_engine_settings_follow_the_environment(monkeypatch):
    """Each access parses its row afresh: a test's setenv counts at once."""
    monkeypatch.delenv("MLXLAB_QMM_SPIN_US", raising=False)
    assert engine_settings.qmm_spin_us == 200
    monkeypatch.setenv("MLXLAB_QMM_SPIN_US", "50")
    assert engine_settings.qmm_spin_us == 50
    monkeypatch.setenv("MLXLAB_CUDA_DECODE_REPLAY", "sometimes")
    with pytest.raises(SettingError, match="^MLXLAB_CUDA_DECODE_REPLAY: must be one of"):
        engine_settings.cuda_decode_replay  # noqa: B018
    assert issubclass(SettingError, ImproperlyConfigured) and issubclass(SettingError, ValueError)
    assert engine_settings.qmm_spin_us == 50  # a bad row fails only what reads it
    with pytest.raises(AttributeError):
        engine_settings.max_n  # noqa: B018  (a Django-side row)
    with pytest.raises(AttributeError, match="read-only"):
        engine_settings.qmm_spin_us = 1  # type: ignore[misc]


def test_engine_settings_need_no_django_settings():
    """The engine reads its rows before, or without, Django's settings."""
    code = (
        "import sys; from labsettings import engine_settings; engine_settings.cpu_fast_path; "
        "assert 'django.conf' not in sys.modules, 'django.conf'"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(BASE_DIR)}  # no DJANGO_SETTINGS_MODULE
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_secrets_stay_out_of_the_repr():
    secret = "a-fernet-key-nobody-may-see"
    built = LabSettings.from_environ(
        {"MLXLAB_HF_TOKEN_KEY": secret, "MLXLAB_API_KEYS": "k1", "MLXLAB_WORKER_SECRET": secret}
    )
    assert built.hf_token_key == built.worker_secret == secret
    assert secret not in repr(built) and "k1" not in repr(built)
    assert "max_n=8" in repr(built)


def test_frozen_and_replace():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.max_n = 3  # type: ignore[misc]
    changed = DEFAULTS.replace(max_n=3)
    assert (changed.max_n, DEFAULTS.max_n) == (3, 8)
    with pytest.raises(TypeError):
        DEFAULTS.replace(no_such_setting=1)


def test_django_settings_hold_the_object(settings):
    assert isinstance(settings.MLXLAB, LabSettings)
    assert settings.MLXLAB.var_dir == settings.VAR_DIR
    limits = [
        settings.MLXLAB.max_request_bytes,
        *settings.MLXLAB.max_request_bytes_by_path.values(),
    ]
    assert max(limits) == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert settings.MLXLAB.job_time_limit_seconds == settings.CELERY_TASK_SOFT_TIME_LIMIT


def test_the_proxy_follows_overrides(settings):
    before = lab_settings.max_n
    with override_settings(MLXLAB=settings.MLXLAB.replace(max_n=before + 5)):
        assert lab_settings.max_n == before + 5
    assert lab_settings.max_n == before
    settings.MLXLAB = settings.MLXLAB.replace(max_tokens_limit=11)  # pytest-django's way
    assert lab_settings.max_tokens_limit == 11
    assert "max_tokens_limit=11" in repr(lab_settings)
    with pytest.raises(AttributeError, match="read-only"):
        lab_settings.max_n = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        lab_settings.no_such_setting  # noqa: B018


def test_labsettings_imports_no_app():
    """It sits below every app, so that any of them may import it."""
    imported = {
        name.split(".")[0]
        for path in Path(labsettings.__file__).parent.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    }
    apps = {"inference", "jobs", "lab", "publishing", "mlxlab", "native"}
    assert imported and not imported & apps


# Where code reads the environment itself: what the engine and native/ must not do with a
# variable of ours. Setting one, or passing the environment to a child, is no read.
READERS = ("get", "pop", "setdefault")


def test_the_engine_and_native_read_no_variable_of_ours_themselves():
    offences = []
    for path in sorted(
        path for top in ("inference", "native") for path in (BASE_DIR / top).rglob("*.py")
    ):
        tree = ast.parse(path.read_text())
        constants = _string_constants(tree)
        for line, key in _environment_reads(tree):
            name = constants.get(key.id) if isinstance(key, ast.Name) else None
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                name = key.value
            if name is None or name.startswith("MLXLAB_"):
                shown = name or (ast.unparse(key) if key else "?")
                offences.append(f"{path.relative_to(BASE_DIR)}:{line}: {shown}")
    assert offences == [], "read it as labsettings' engine_settings (a row of the table)"


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module's NAME = "text" lines, so that a variable named by a constant counts."""
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _environment_reads(tree: ast.Module) -> Iterator[tuple[int, ast.expr | None]]:
    """(line, the variable's expression) of each read of one environment variable:
    os.environ.get/pop/setdefault, os.environ[...], ... in os.environ, os.getenv."""
    from_os = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
    }

    def is_os(node: ast.expr, name: str) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == name and isinstance(node.value, ast.Name) and node.value.id == "os"
        return isinstance(node, ast.Name) and from_os.get(node.id) == name

    def is_environ(node: ast.expr) -> bool:
        return is_os(node, "environ") or is_os(node, "environb")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func, key = node.func, node.args[0] if node.args else None
            method = isinstance(func, ast.Attribute) and func.attr in READERS
            if (method and is_environ(func.value)) or is_os(func, "getenv"):
                yield node.lineno, key
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if is_environ(node.value):
                yield node.lineno, node.slice
        elif isinstance(node, ast.Compare) and any(map(is_environ, node.comparators)):
            yield node.lineno, node.left


def test_the_environment_reads_are_found():
    """The walk above finds each form of a read (else it would pass on anything)."""
    tree = ast.parse(
        "import os\nfrom os import environ as env, getenv\nNAME = 'MLXLAB_X'\n"
        "os.environ.get('MLXLAB_A')\nos.environ[NAME]\n'MLXLAB_B' in os.environ\n"
        "getenv('MLXLAB_C')\nenv.pop('HOME')\nos.environ['MLX_RANK'] = '0'\n"
        "child = {**os.environ, 'MLXLAB_D': '1'}\n"
    )
    reads = [ast.unparse(key) for _, key in _environment_reads(tree)]
    assert sorted(reads) == sorted(["'MLXLAB_A'", "NAME", "'MLXLAB_B'", "'MLXLAB_C'", "'HOME'"])
    assert _string_constants(tree) == {"NAME": "MLXLAB_X"}
