"""Live job progress for the browser: one websocket per job page, one for the jobs list."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .events import LIST_GROUP, job_dict, job_group
from .models import Job

UNAUTHENTICATED, FORBIDDEN, NOT_FOUND = 4401, 4403, 4404


def _job_state(job_id) -> dict | None:
    job = Job.objects.filter(id=job_id).select_related("owner").first()
    return job_dict(job) if job else None


class JobConsumer(AsyncJsonWebsocketConsumer):
    """Sends the job's state on connect, then every update the worker publishes."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        if not user.is_staff:
            await self.close(code=FORBIDDEN)
            return
        job_id = self.scope["url_route"]["kwargs"].get("job_id")
        self.group = job_group(job_id) if job_id else LIST_GROUP
        state = await database_sync_to_async(_job_state)(job_id) if job_id else None
        if job_id and state is None:
            await self.close(code=NOT_FOUND)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        if state is not None:
            await self.send_json({"type": "job", "job": state})

    async def disconnect(self, code) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def job_update(self, event: dict) -> None:
        await self.send_json({"type": "job", "job": event["job"]})
