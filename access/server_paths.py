"""Server paths that staff may name in a request (a GGUF to import, a finetune's dataset
folder): only inside the folders of MLXLAB_IMPORT_ROOTS.

Symlinks are resolved before the check, so a link inside a root that points elsewhere is
refused. A refusal is one answer, whatever the reason (outside the roots, missing, not a
file, a link out): the caller's message then tells nothing of what exists on the server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from labsettings import lab_settings


def confined_path(
    text: object, *, kind: Literal["file", "folder"], suffix: str = ""
) -> Path | None:
    """The real path `text` names when it is an absolute path to a `kind` (ending in
    `suffix`, if given) inside an import root; None otherwise."""
    if not isinstance(text, str) or "\0" in text or not os.path.isabs(text):
        return None
    real = Path(os.path.realpath(text))
    roots = [Path(os.path.realpath(root)) for root in lab_settings.import_roots]
    # Only a path inside a root is looked at on disk.
    if not any(real.is_relative_to(root) for root in roots):
        return None
    # The name's suffix, not the target's: a Hub cache's snapshot links to a bare blob.
    if suffix and Path(text).suffix.lower() != suffix:
        return None
    present = real.is_file() if kind == "file" else real.is_dir()
    return real if present else None
