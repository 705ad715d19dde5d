"""Schemathesis against /api/schema/ on a live loopback server with keys: no 5xx, no
response outside the schema, no schema-violating request accepted.

Bounded: 10 examples per operation and a hard time limit; generations are 2 tokens
at most (the server's MLXLAB_MAX_TOKENS_LIMIT, published as the schema's maximum)
and /v1 bodies at most 2 KiB (MLXLAB_MAX_REQUEST_BYTES), so no prompt takes long
to prefill on a small CPU. MLXLAB_FUZZ_SEED picks another seed; the default one
keeps CI reproducible.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CONFIG = Path(__file__).with_name("schemathesis.toml")
TIME_LIMIT_SECONDS = 480

# positive_data_acceptance is left out: a schema-valid request can still be refused,
# for what JSON Schema cannot say (the model must exist, a forced tool must be offered,
# 2.0 is a JSON Schema integer but mlx_lm.server's checks want 2, a chat template may
# reject a conversation).
EXCLUDED_CHECKS = "positive_data_acceptance"

# An event stream that stays open until the client leaves has no response to check: each
# example would wait out the request timeout. tests/api/test_operator_routes.py reads it.
UNFUZZED_PATHS = ("/api/events",)


def test_schemathesis_finds_nothing(secured_server, tmp_path):
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file", str(CONFIG),
        "--no-color",
        "run", f"{secured_server.url}/api/schema/",
        "--header", f"Authorization: Bearer {secured_server.keys['fuzz']}",
        "--checks", "all",
        "--exclude-checks", EXCLUDED_CHECKS,
        "--max-examples", "10",
        "--seed", os.environ.get("MLXLAB_FUZZ_SEED", "20261129"),
        "--workers", "1",
        "--request-timeout", "120",
        "--max-failures", "20",
        "--generation-database", "none",
        *(option for path in UNFUZZED_PATHS for option in ("--exclude-path", path)),
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=TIME_LIMIT_SECONDS
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-20000:]
    selected, total = re.search(r"Selected: (\d+)/(\d+)", report).groups()
    # Every operation but the unfuzzed streams.
    assert int(selected) == int(total) - len(UNFUZZED_PATHS)
    assert selected == re.search(r"Tested: (\d+)", report)[1]
