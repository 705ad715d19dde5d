"""Keeps PyTorch out of processes that serve MLX models.

transformers (5.x) imports PyTorch whenever it is installed, from
`configuration_utils` on up, which mlx-lm's tokenizer loading reaches; xgrammar
brings PyTorch into the environment. Nothing the engine uses needs it (tokenizers
are Rust, arrays are MLX), yet it costs about 210 MB resident and a second of start
in every web, worker and job process. transformers asks whether PyTorch is there
once and caches the answer, so asking first with the module hidden keeps it out for
the process's life. xgrammar's matcher still imports PyTorch itself, on the first
constrained request (`grammar.py` imports xgrammar only then).
"""

from __future__ import annotations

import os
import sys
from unittest import mock


def keep_torch_out_of_transformers() -> bool:
    """Make transformers see no PyTorch; False when that is too late (already imported)."""
    if "torch" in sys.modules or "transformers.utils.import_utils" in sys.modules:
        return "torch" not in sys.modules and not _transformers_sees_torch()
    # With None there, find_spec answers "absent"; the advisory env var silences the
    # "PyTorch was not found" advice transformers prints on import, which is not news here.
    quiet = {"TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    # (Not mock.patch.dict on sys.modules: it would also drop what the import brings in.)
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        with mock.patch.dict(os.environ, quiet):
            return not _transformers_sees_torch()
    finally:
        del sys.modules["torch"]


def _transformers_sees_torch() -> bool:
    from transformers.utils import import_utils

    return import_utils.is_torch_available()
