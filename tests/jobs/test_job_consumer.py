"""The job websockets: state on connect, then what a worker publishes through Redis."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from jobs.events import publish
from jobs.models import Job
from jobs.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(user, path: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    socket.scope["user"] = user
    return socket


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("boss", is_staff=True)


def test_a_job_page_socket_gets_the_state_then_updates(staff):
    job = Job.objects.create(kind="dataset", params={"format": "chat"}, owner=staff)

    async def scenario():
        page = communicator(staff, f"/ws/jobs/{job.id}/")
        listing = communicator(staff, "/ws/jobs/")
        assert (await page.connect())[0] and (await listing.connect())[0]
        first = await page.receive_json_from(timeout=10)
        job.status, job.progress, job.message = "running", 0.5, "halfway"
        await sync_to_async(publish)(job)  # what the worker does, from another process
        update = await page.receive_json_from(timeout=10)
        listed = await listing.receive_json_from(timeout=10)
        await page.disconnect()
        await listing.disconnect()
        return first, update, listed

    first, update, listed = asyncio.run(scenario())
    assert first["job"]["status"] == "queued" and first["job"]["id"] == str(job.id)
    assert (update["job"]["status"], update["job"]["progress"]) == ("running", 0.5)
    assert listed["job"]["message"] == "halfway"


def test_sockets_refuse_anonymous_non_staff_and_unknown_jobs(django_user_model, staff):
    from django.contrib.auth.models import AnonymousUser

    plain = django_user_model.objects.create_user("pleb")

    async def code(user, path):
        accepted, close_code = await communicator(user, path).connect()
        assert not accepted
        return close_code

    missing = "/ws/jobs/00000000-0000-0000-0000-000000000000/"
    assert asyncio.run(code(AnonymousUser(), "/ws/jobs/")) == 4401
    assert asyncio.run(code(plain, "/ws/jobs/")) == 4403
    assert asyncio.run(code(staff, missing)) == 4404
