"""POST /engine/replicas/<id>/drain: one replica out of rotation, for a rolling restart.

The replica finishes the streams it holds while its model's other replicas take the new
requests; then a local one restarts and rejoins, and a remote one rejoins once its host
restarts it (inference/workers/residency.py), or at once on DELETE (the drain called
off: a local one not yet restarted keeps its process). For staff: a key, or a session that passes
CSRF (a page a staff user visits must not drain the lab in their name).
"""

from __future__ import annotations

import asyncio

from django.http import HttpRequest, JsonResponse

from access.api_keys import presented_key
from access.csrf import csrf_passes

from .api.endpoints import api_endpoint
from .engines import supervisor
from .errors import ApiError
from .views_status import worker_report


@api_endpoint("POST", "DELETE", staff=True)
async def drain_replica(request: HttpRequest, replica_id: str) -> JsonResponse:
    if presented_key(request) is None and not csrf_passes(request):
        return ApiError(
            "A session's request needs its CSRF token.", status=403,
            type="permission_error", code="csrf_failed",
        ).response()  # fmt: skip
    change = supervisor().drain if request.method == "POST" else supervisor().undrain
    if not await asyncio.wrap_future(change(replica_id)):
        return ApiError(
            f"No resident replica has the id {replica_id!r} (GET /engine lists them).",
            status=404, code="replica_not_found",
        ).response()  # fmt: skip
    worker = next((w for w in supervisor().resident() if w.id == replica_id), None)
    report = worker_report(worker) if worker is not None else {"id": replica_id}
    return JsonResponse(report, status=202 if request.method == "POST" else 200)
