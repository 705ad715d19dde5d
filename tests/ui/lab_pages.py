"""Helpers of the lab page tests: calls to the lab's API from a logged-in page, and an
evaluate job with figures written straight into the session server's database."""

from __future__ import annotations

import subprocess
import sys

from playwright.sync_api import Page

from tests.conftest import DEFAULT_MODEL, LAB_USER, ROOT, THINKING_MODEL, LiveServer


def api_post(page: Page, path: str, data: dict | None = None) -> dict:
    """POST to the lab's API as the page's user (its session and CSRF cookie)."""
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(path, data=data or {}, headers={"X-CSRFToken": token})
    assert answer.ok, answer.text()
    return answer.json()


def _figures(name: str, perplexity: float) -> dict:
    return {
        "name": name, "adapter": None, "perplexity": perplexity, "loss": 1.94,
        "accuracy": 0.65, "exact_match": None, "examples": 46, "tokens": 139,
        "tokens_per_second": 121.0, "peak_memory_bytes": 590124192, "bits_per_weight": 5.85,
    }  # fmt: skip


# A succeeded evaluate job as jobs/evaluate.py records one, nulls included.
EVALUATE_JOB = f"""
from django.contrib.auth.models import User
from django.utils import timezone
from jobs.models import Job
now = timezone.now()
variants = [
    {{"model": m, "adapter": None, "model_path": "/m/" + m, "adapters": []}}
    for m in ({DEFAULT_MODEL!r}, {THINKING_MODEL!r})
]
job = Job.objects.create(
    kind="evaluate", status="succeeded", progress=1.0, message="done",
    params={{"variants": variants, "dataset": "builtin", "max_examples": None,
             "dataset_path": "/eval/basic.jsonl", "dataset_label": "builtin (basic.jsonl)"}},
    result={{"variants": [{_figures(DEFAULT_MODEL, 6.96)!r}, {_figures(THINKING_MODEL, 7.1)!r}],
             "dataset": {{"source": "builtin", "label": "builtin (basic.jsonl)", "examples": 46,
                          "available": 46, "multiple_choice": 20, "exact_answer": 16,
                          "perplexity_only": 10, "tokens": 139}}}},
    owner=User.objects.get(username={LAB_USER!r}), started_at=now, finished_at=now,
    log_tail="evaluate started\\nfinished",
)
print(job.id)
"""


def evaluate_job(server: LiveServer) -> str:
    """The id of a new succeeded evaluate job in the server's database."""
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", EVALUATE_JOB],
        cwd=ROOT, env=server.env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return made.stdout.strip().splitlines()[-1]


def delete_api_keys(server: LiveServer, label_prefix: str) -> None:
    """Removes keys a test made: any key row, revoked or not, closes the server's open API
    to the keyless tests that share it."""
    code = (
        "from access.models import ApiKey;"
        f" ApiKey.objects.filter(label__startswith={label_prefix!r}).delete()"
    )
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT, env=server.env, check=True, capture_output=True,
    )  # fmt: skip
