"""The web process's start: what it imported is frozen out of the cyclic collector."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, sys
import mlxlab.asgi
print(gc.get_freeze_count(), "inference.views_openai" in sys.modules)
"""


def test_the_web_process_freezes_what_it_imported_views_included(tmp_path):
    env = {
        **os.environ,
        "MLXLAB_DB_PATH": str(tmp_path / "db.sqlite3"),
        "MLXLAB_PRELOAD": "0",
        "MLXLAB_JOB_WATCHDOG_IN_WEB": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    frozen, views = done.stdout.split()
    # Django, DRF and the views: far more than a bare interpreter's few thousand objects.
    assert int(frozen) > 50_000
    assert views == "True"
