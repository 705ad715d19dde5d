"""manage.py pull REPO_ID: a pull job run here, in the foreground, with a progress bar.

It is the same job as the lab's (a row on the jobs page, the same checks, resume and
registration), run by this process instead of a Celery worker, so it needs no queue.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone

from jobs.context import JobParamsError
from jobs.kinds import validate
from jobs.models import Job
from jobs.runner import execute

BAR = 30


class Command(BaseCommand):
    help = "Pull a model from the Hugging Face Hub (HF_ENDPOINT) and register it."

    def add_arguments(self, parser):
        parser.add_argument("repo_id", help="org/name of a model repo")
        parser.add_argument("--revision", default="main", help="branch, tag or commit")
        parser.add_argument("--name", help="registry name (default: from the repo's name)")
        parser.add_argument("--quantize", type=int, metavar="BITS", help="quantize to BITS")
        parser.add_argument("--group-size", type=int, default=64, help="with --quantize")
        parser.add_argument("--gguf-file", help="which .gguf file of a GGUF repo")

    def handle(self, *args, **options):
        params = {"repo_id": options["repo_id"], "revision": options["revision"]}
        if options["name"]:
            params["name"] = options["name"]
        if options["quantize"]:
            params["quantize"] = {"bits": options["quantize"], "group_size": options["group_size"]}
        if options["gguf_file"]:
            params["gguf_file"] = options["gguf_file"]
        try:
            params = validate("pull", params)
        except JobParamsError as error:
            raise CommandError(str(error)) from None
        job = Job.objects.create(kind="pull", params=params, message="queued")
        self.stderr.write(f"pull {params['repo_id']} as {params['name']} (job {job.id})")
        status = self._run(job)
        job.refresh_from_db()
        if status != "succeeded":
            raise CommandError(job.error or f"the pull {status}")
        self.stdout.write(f"pulled {job.result.get('model')} ({job.result.get('commit')})")

    def _run(self, job: Job) -> str:
        done = threading.Event()
        watcher = threading.Thread(target=self._show, args=(job.id, done), daemon=True)
        watcher.start()
        # The bar says what each request would: the HTTP clients' lines are noise here, and
        # mlx-lm's convert prints to stdout, which scripts read for the result line.
        for name in ("httpx", "httpx2", "huggingface_hub"):
            logging.getLogger(name).setLevel(logging.WARNING)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                return execute(job.id, f"cli@{socket.gethostname()}")
        except KeyboardInterrupt:  # what arrived stays for the next pull to resume from
            Job.objects.filter(id=job.id, status__in=("queued", "running")).update(
                status="cancelled", finished_at=timezone.now(), message="interrupted"
            )
            return "was interrupted"
        finally:
            done.set()
            watcher.join(2)
            self._draw(job.id)  # the last state, however quick the pull was
            sys.stderr.write("\n")

    def _show(self, job_id, done: threading.Event) -> None:
        try:
            while not done.wait(0.5):
                self._draw(job_id)
        finally:
            connection.close()

    def _draw(self, job_id) -> None:
        job = Job.objects.filter(id=job_id).values("progress", "message").first()
        if job:
            filled = int(job["progress"] * BAR)
            bar = "#" * filled + "-" * (BAR - filled)
            sys.stderr.write(f"\r[{bar}] {job['progress']:4.0%} {job['message'][:60]:60}")
            sys.stderr.flush()
