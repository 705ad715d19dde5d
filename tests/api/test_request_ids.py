"""Request ids end to end (issue 51): a client's id kept when sane, one made otherwise; on
every answer (and as Anthropic's `request-id`); in the web process's and the model
worker's log lines of that request; JSON log lines when asked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import anthropic
import pytest

from tests.conftest import ROOT

MADE = re.compile(r"req_[0-9a-f]{32}")


def lines_with(server, request_id: str, logger: str, timeout: float = 10) -> list[str]:
    """The server log's lines for `request_id` from `logger` (the worker's are written as
    it goes, so they may trail the answer a little)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [line for line in server.log().splitlines() if f" {logger} [{request_id}]:" in line]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_client_id_is_kept_and_found_in_both_processes_logs(lab_server, http, model):
    request_id = f"trace-{uuid.uuid4().hex[:12]}"
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    response = http.post("/v1/chat/completions", json=body, headers={"X-Request-Id": request_id})
    assert response.status_code == 200 and response.headers["x-request-id"] == request_id
    access = lines_with(lab_server, request_id, "mlxlab.access")
    assert len(access) == 1 and "POST /v1/chat/completions 200" in access[0]
    worker = lines_with(lab_server, request_id, "inference.engine.process.worker")
    assert any("request accepted" in line for line in worker), worker
    assert any("request finished" in line for line in worker), worker


@pytest.mark.parametrize("sent", ["has space", "x" * 129, "", "\u00e9t\u00e9"])
def test_an_insane_id_is_replaced(http, sent):
    response = http.get("/v1/models", headers={"X-Request-Id": sent.encode("utf-8")})
    assert response.status_code == 200
    assert MADE.fullmatch(response.headers["x-request-id"])


def test_the_sdks_read_the_id(lab_server, client, model):
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert MADE.fullmatch(reply._request_id)
    claude = anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model=model, max_tokens=2, messages=[{"role": "user", "content": "Hi"}]
    )
    assert MADE.fullmatch(raw.headers["request-id"])
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    assert raw.parse()._request_id == raw.headers["request-id"]
    # Each answer its own id.
    assert reply._request_id != raw.headers["request-id"]


LOG_ONE_LINE = """
import logging
from inference.request_ids import REQUEST_ID
REQUEST_ID.set("trace-json-1")
logging.getLogger("inference.serve").warning("worker %s is slow", "w1")
"""


def test_json_log_lines_when_asked(lab_server):
    env = {**lab_server.env, "MLXLAB_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", LOG_ONE_LINE],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    record = json.loads(done.stderr.strip().splitlines()[-1])
    assert record["message"] == "worker w1 is slow"
    assert record["level"] == "WARNING" and record["logger"] == "inference.serve"
    assert record["request_id"] == "trace-json-1" and "time" in record
