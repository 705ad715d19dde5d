"""GGUF imports started from the models page: run on a thread, watched by polling.

An import of a small model takes about a second; a big one takes minutes, so the
page gets an id at once and polls its progress.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from django.db import close_old_connections

from access.server_paths import confined_path
from inference.gguf.header import GGUFImportError
from inference.model_registry import model_exists, model_import_gguf, model_name_from

log = logging.getLogger(__name__)


class ImportRefused(ValueError):
    """The import cannot start; the text says why."""


@dataclass
class ImportStatus:
    id: str
    path: str
    name: str
    status: str = "running"  # running | succeeded | failed
    progress: float = 0.0
    message: str = "starting"
    model: str | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


_imports: dict[str, ImportStatus] = {}
_lock = threading.Lock()


def import_status(import_id: str) -> ImportStatus | None:
    return _imports.get(import_id)


# Whatever is wrong with the path, the answer is this: it tells nothing of the server's files.
PATH_REFUSED = "path must name a .gguf file inside MLXLAB_IMPORT_ROOTS"


def start_import(path_text: str, name: str | None) -> ImportStatus:
    """Check the request now (clear errors at once), then convert on a thread."""
    path = confined_path(path_text, kind="file", suffix=".gguf")
    if path is None:
        raise ImportRefused(PATH_REFUSED)
    name = name or model_name_from(Path(path_text))
    if model_exists(name):
        raise ImportRefused(f"a model named {name!r} already exists")
    status = ImportStatus(id=uuid.uuid4().hex, path=str(path), name=name)
    with _lock:
        if any(s.status == "running" and s.name == name for s in _imports.values()):
            raise ImportRefused(f"{name!r} is being imported already")
        _imports[status.id] = status
    threading.Thread(target=_run, args=(status,), name=f"import-{name}", daemon=True).start()
    return status


def _run(status: ImportStatus) -> None:
    def progress(fraction: float, message: str) -> None:
        status.progress, status.message = fraction, message

    try:
        record = model_import_gguf(gguf_path=Path(status.path), name=status.name, progress=progress)
        status.model, status.status, status.message = record.name, "succeeded", "imported"
    except GGUFImportError as error:
        status.status, status.error, status.message = "failed", str(error), "failed"
    except Exception as error:  # a bug or a disk problem: say so on the page, log the rest
        log.exception("import of %s failed", status.path)
        status.status, status.error, status.message = "failed", f"import failed: {error}", "failed"
    finally:
        close_old_connections()
