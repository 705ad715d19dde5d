"""The table's first rows: where the lab keeps its state, and how much it logs.

Every folder's default is under `var_dir`, so these rows come first in `LabSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .parsers import one_of, parse_paths
from .rows import Derived, Table, setting, under_var

# The checkout: var/ lives in it unless MLXLAB_VAR_DIR says otherwise.
BASE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PlaceSettings(Table):
    """Where things live; a Derived default reads rows above it."""

    var_dir: Path = setting(
        "MLXLAB_VAR_DIR", Path, BASE_DIR / "var",
        "The lab's state: database, secret key, uploads, token key, Redis files.",
    )  # fmt: skip
    db_path: Path = setting("MLXLAB_DB_PATH", Path, under_var("db.sqlite3"), "The SQLite database.")
    models_dir: Path = setting(
        "MLXLAB_MODELS_DIR", Path, under_var("models"), "Imported models, one folder each."
    )
    artifacts_dir: Path = setting(
        "MLXLAB_ARTIFACTS_DIR", Path, under_var("artifacts"),
        "What jobs make (quantized models, adapters, datasets), one folder per job.",
    )  # fmt: skip
    uploads_dir: Path = setting(
        "MLXLAB_UPLOADS_DIR", Path, under_var("uploads"),
        "Files uploaded for dataset jobs, until a job reads them.",
    )  # fmt: skip
    # Checked with symlinks resolved (access/server_paths.py).
    import_roots: tuple[Path, ...] = setting(
        "MLXLAB_IMPORT_ROOTS", parse_paths,
        Derived(lambda values: (values["var_dir"] / "imports",), "var_dir/imports"),
        "Folders (colon-separated; empty: none) whose files staff may name by server path, "
        "links resolved: a GGUF to import, a finetune's dataset folder.",
    )  # fmt: skip
    worker_socket_dir: Path = setting(
        "MLXLAB_WORKER_SOCKET_DIR", Path, under_var("run"),
        "Model workers' sockets (ipc://, Unix sockets).",
    )  # fmt: skip
    log_level: str = setting("MLXLAB_LOG_LEVEL", str, "INFO", "The root logger's level.")
    log_format: str = setting(
        "MLXLAB_LOG_FORMAT", one_of("plain", "json"), "plain",
        "Log lines as text, or as JSON objects (one per line, with request_id).",
    )  # fmt: skip
