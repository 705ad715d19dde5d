"""/api/settings/hf-token and /api/{quantize,finetune,dataset}/push (staff only).

Answers are `{"ok": true, ...}` or `{"ok": false, "error": "..."}`. A push waits for
its upload (up to MLXLAB_PUBLISH_WAIT_SECONDS, then it answers with the job to
poll); a client that goes away while waiting cancels the upload (499).
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from access.api_keys import acheck_key, key_user, presented_key
from access.csrf import csrf_passes
from inference import json_body
from jobs.context import JobParamsError
from jobs.events import job_dict
from jobs.models import Job
from jobs.submission import BrokerUnavailable, cancel_job, queue_job
from labsettings import lab_settings

from .hub import HubError, repo_url, whoami
from .push import validate as validate_push
from .token_store import token_delete, token_exists, token_save

log = logging.getLogger(__name__)

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that hung up first


def failure(message: str, status: int = 400, **extra) -> JsonResponse:
    return JsonResponse({"ok": False, "error": message, **extra}, status=status)


def not_allowed(request: HttpRequest, allowed: str) -> JsonResponse:
    answer = failure(f"method {request.method} not allowed", 405)
    answer["Allow"] = allowed
    return answer


async def staff_user(request: HttpRequest):
    """(user, None) for a staff API key or a staff session passing CSRF, else (None, answer)."""
    raw = presented_key(request)
    if raw is not None:
        check = await acheck_key(raw)
        if not check.ok:
            return None, failure(check.reason, 401)
        user = await sync_to_async(key_user)(check)
    else:
        user = await request.auser()
        if not user.is_authenticated:
            return None, failure("Log in, or send an API key of your user.", 401)
        if not csrf_passes(request):
            return None, failure("CSRF check failed: send the X-CSRFToken header.", 403)
    if user is None or not user.is_active or not user.is_staff:
        return None, failure("Only staff users may do this.", 403)
    return user, None


def json_object(request: HttpRequest) -> dict:
    try:
        body = json_body.loads(request.body or b"null")
    except json_body.JsonRejected:
        body = None
    if not isinstance(body, dict):
        raise JobParamsError("expected a JSON object")
    return body


@csrf_exempt  # programs use keys; a browser session passes the CSRF check in staff_user
async def hf_token(request: HttpRequest) -> JsonResponse:
    user, denied = await staff_user(request)
    if denied:
        return denied
    if request.method == "GET":
        return JsonResponse({"ok": True, "hasToken": await sync_to_async(token_exists)()})
    if request.method == "DELETE":
        await sync_to_async(token_delete)()
        return JsonResponse({"ok": True, "hasToken": False})
    if request.method != "POST":
        return not_allowed(request, "GET, POST, DELETE")
    try:
        token = json_object(request).get("token")
    except JobParamsError as error:
        return failure(str(error))
    if not isinstance(token, str) or not token.strip():
        return failure("token required")
    token = token.strip()
    # It travels in an HTTP header: a character outside printable ASCII could never be sent.
    if not (token.isascii() and token.isprintable()):
        return failure("token must be printable ASCII, as Hugging Face tokens are")
    return await _save_token(token, user)


async def _save_token(token: str, user) -> JsonResponse:
    """Check the token with the Hub when it answers; a token it rejects is not saved."""
    try:
        username, verified = await sync_to_async(whoami)(token), True
    except HubError as error:
        if error.status is not None:
            return failure(f"the Hub rejected this token: {error}")
        username, verified = "", False  # offline: keep it, say it is unverified
    await sync_to_async(token_save)(token, user=user, username=username)
    return JsonResponse({"ok": True, "hasToken": True, "verified": verified, "username": username})


def _push_fields(kind: str, body: dict) -> dict:
    repo_id = body.get("repo_id")
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise JobParamsError("repo_id required")
    for key in ("job_id", "source_path"):
        if body.get(key) is not None and (not isinstance(body[key], str) or not body[key].strip()):
            raise JobParamsError(f"{key} must be a nonempty string")
    for key in ("private", "wait"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise JobParamsError(f"{key} must be a boolean")
    return {
        "kind": kind,
        "repo_id": repo_id.strip(),
        "private": body.get("private") or False,
        "job_id": (body.get("job_id") or "").strip() or None,
        "source_path": (body.get("source_path") or "").strip() or None,
    }


def _submit(kind: str, body: dict, user) -> Job:
    return queue_job(kind="publish", params=validate_push(_push_fields(kind, body)), owner=user)


@csrf_exempt
async def push(request: HttpRequest, kind: str) -> JsonResponse:
    if request.method != "POST":
        return not_allowed(request, "POST")
    user, denied = await staff_user(request)
    if denied:
        return denied
    try:
        body = json_object(request)
        job = await sync_to_async(_submit)(kind, body, user)
    except JobParamsError as error:
        return failure(str(error))
    except BrokerUnavailable as error:
        return failure(str(error), 503)
    url = repo_url(job.params["repo_id"], job.params["repo_type"])
    if body.get("wait") is False:
        return JsonResponse({"ok": True, "url": url, "job": await _state(job.id)}, status=202)
    try:
        state = await _wait(job.id)
    except asyncio.CancelledError:
        await sync_to_async(cancel_job)(await Job.objects.aget(id=job.id))
        log.info("push %s: the client closed the request; upload cancelled (499)", job.id)
        return failure("Request cancelled", CLIENT_CLOSED_REQUEST)
    if state["status"] == "succeeded":
        return JsonResponse({"ok": True, "url": url, "job": state})
    if state["status"] in Job.FINISHED:
        return failure(state["error"] or f"the push was {state['status']}", job=state)
    return JsonResponse({"ok": True, "url": url, "job": state}, status=202)  # poll the job


async def _state(job_id) -> dict:
    job = await Job.objects.select_related("owner").aget(id=job_id)
    return job_dict(job)


async def _wait(job_id) -> dict:
    """The job's state once it ends, or when waiting longer is not worth holding the request."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lab_settings.publish_wait_seconds
    while True:
        state = await _state(job_id)
        if state["status"] in Job.FINISHED or loop.time() > deadline:
            return state
        await asyncio.sleep(0.25)
