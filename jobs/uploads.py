"""Files uploaded for dataset jobs, kept under VAR_DIR/uploads until a job reads them.

Each upload is `<uuid hex><ext>` with a sidecar `<uuid hex>.meta.json` holding the
original filename and owner. The sidecar's name must never end in an accepted
extension on its own, or it could be mistaken for an upload.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

from labsettings import lab_settings

from .context import JobParamsError

EXTENSIONS = (".jsonl", ".json", ".csv")
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
_CHUNK = 1024 * 1024


def uploads_dir() -> Path:
    """MLXLAB_UPLOADS_DIR: a shared folder where Celery workers run on other hosts."""
    return lab_settings.uploads_dir


def max_upload_bytes() -> int:
    return lab_settings.max_upload_bytes


def save_upload(fileobj, filename: str, owner_id: int) -> str:
    """Store an uploaded file; returns its upload id. Raises JobParamsError if refused."""
    ext = Path(filename or "").suffix.lower()
    if ext not in EXTENSIONS:
        raise JobParamsError(f"'{filename}': only {', '.join(EXTENSIONS)} files can be uploaded")
    folder = uploads_dir()
    folder.mkdir(parents=True, exist_ok=True)
    upload_id = uuid.uuid4().hex
    target = folder / f"{upload_id}{ext}"
    # Written under a name upload_path() never finds, so a half-written or oversized
    # file is never read by a job.
    partial = folder / f"{upload_id}.partial"
    try:
        size = _copy_limited(_chunks(fileobj), partial, max_upload_bytes())
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    meta = {"filename": Path(filename).name, "owner_id": owner_id, "size": size}
    _meta_path(upload_id).write_text(json.dumps(meta))
    return upload_id


def upload_path(upload_id: str) -> Path:
    """The stored file of `upload_id`; JobParamsError if the id is malformed or unknown."""
    if isinstance(upload_id, str) and _UPLOAD_ID.fullmatch(upload_id):
        for ext in EXTENSIONS:
            path = uploads_dir() / f"{upload_id}{ext}"
            if path.is_file():
                return path
    raise JobParamsError(f"upload '{upload_id}' not found")


def upload_meta(upload_id: str) -> dict:
    """The sidecar of an existing upload: filename, owner_id, size ({} if it was lost)."""
    upload_path(upload_id)
    try:
        return json.loads(_meta_path(upload_id).read_text())
    except (OSError, ValueError):
        return {}


def _meta_path(upload_id: str) -> Path:
    return uploads_dir() / f"{upload_id}.meta.json"


def _chunks(fileobj) -> Iterator[bytes]:
    # Django's UploadedFile streams from its temporary file; anything else is read in pieces.
    if hasattr(fileobj, "chunks"):
        yield from fileobj.chunks()
        return
    while chunk := fileobj.read(_CHUNK):
        yield chunk


def _copy_limited(chunks: Iterator[bytes], target: Path, limit: int) -> int:
    size = 0
    with open(target, "wb") as out:
        for chunk in chunks:
            data = chunk.encode("utf-8") if isinstance(chunk, str) else chunk
            size += len(data)
            if size > limit:
                raise JobParamsError(f"the upload is larger than the limit of {limit} bytes")
            out.write(data)
    return size
