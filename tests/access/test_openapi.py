"""The OpenAPI schema at /api/schema/: valid, complete, true to the server; its docs page."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from django.contrib.auth.models import User
from drf_spectacular.validation import validate_schema
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from access import urls as access_urls
from access.api_keys import api_key_create
from inference import urls as inference_urls
from jobs import api_urls as jobs_api_urls
from lab import api_urls as lab_api_urls
from publishing import urls as publishing_urls
from tests.conftest import DEFAULT_MODEL

NOT_OPERATIONS = {"v1/<rest>", "^schema/?$", "^docs/?$", r"^[\s\S]*$"}


def schema(client) -> dict:
    client.force_login(User.objects.get_or_create(username="schema-reader")[0])
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


def routes() -> set[str]:
    """Every path Django routes to an endpoint, in OpenAPI's template syntax."""
    found = set()
    for prefix, patterns in (
        ("/", inference_urls.urlpatterns),
        ("/api/", access_urls.urlpatterns),
        ("/api/", lab_api_urls.urlpatterns),
        ("/api/", jobs_api_urls.urlpatterns),
        ("/api/", publishing_urls.urlpatterns),
    ):
        for pattern in patterns:
            text = str(pattern.pattern).replace("^v1/(?P<rest>.*)$", "v1/<rest>")
            if text not in NOT_OPERATIONS:
                found.add(prefix + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", text))
    return found


def test_schema_is_valid_openapi_and_covers_every_endpoint(client, db):
    document = schema(client)
    validate_schema(document)
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == routes()
    operations = [op for item in document["paths"].values() for op in item.values()]
    assert len({op["operationId"] for op in operations}) == len(operations)
    # Unique by name, not by drf-spectacular's numeral suffixes (generated clients would
    # get models_retrieve_2).
    assert not [op["operationId"] for op in operations if re.search(r"_\d+$", op["operationId"])]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            if path != "/health":
                assert "401" in codes, (method, path)
            assert "413" in codes, (method, path)


def test_schema_follows_the_server(client, db, settings):
    open_security = schema(client)["paths"]["/v1/models"]["get"]["security"]
    assert {} in open_security  # no key yet: the API is open
    api_key_create(user=User.objects.create_user("owner"))
    settings.MLXLAB = settings.MLXLAB.replace(max_tokens_limit=7, max_images=3)
    document = schema(client)
    assert {} not in document["paths"]["/v1/models"]["get"]["security"]
    assert document["paths"]["/health"]["get"]["security"] == [{}]
    chat = document["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert chat["max_tokens"]["maximum"] == 7 and chat["max_completion_tokens"]["maximum"] == 7
    anthropic = document["components"]["schemas"]["MessagesRequest"]["properties"]
    assert anthropic["max_tokens"]["maximum"] == 7
    responses = document["components"]["schemas"]["ResponseRequest"]["properties"]
    for described in (chat["messages"], anthropic["messages"], responses["input"]):
        assert "at most 3 images per request (MLXLAB_MAX_IMAGES)" in described["description"]


def test_schema_and_docs_need_a_login_or_a_key(client, db):
    """As every /api endpoint does (issue 56: they answered anyone)."""
    member = User.objects.create_user("reader")
    _, raw = api_key_create(user=member)
    for path in ("/api/schema/", "/api/docs/", "/api/docs/?script="):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(path, headers={"Authorization": f"Bearer {raw}"}).status_code == 200
    client.force_login(member)
    assert client.get("/api/docs/").status_code == 200


def test_docs_page_and_its_assets_are_served_locally(secured_server):
    key = {"Authorization": f"Bearer {secured_server.keys['member']}"}
    html = httpx.get(secured_server.url + "/api/docs/", headers=key).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    # No CDN; the start-up script too is a file of this server (the CSP allows no inline one).
    assert assets and all(asset.startswith("/") for asset in assets), assets
    assert "<script>" not in html and "<style>" not in html
    for asset in assets:
        response = httpx.get(secured_server.url + asset.replace("&amp;", "&"), headers=key)
        assert response.status_code == 200 and len(response.content) > 100, asset


CHAT = [{"role": "user", "content": "Hi"}]
STREAMS = [
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}),
    (
        "/v1/completions",
        {"prompt": "Once upon", "max_tokens": 1, "logprobs": True, "top_logprobs": 2},
    ),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 1, "store": False}),
    ("/v1/messages", {"model": DEFAULT_MODEL, "max_tokens": 1, "messages": CHAT}),
]


@pytest.fixture(scope="module")
def live_schema(secured_server) -> dict:
    key = {"Authorization": f"Bearer {secured_server.keys['member']}"}
    return httpx.get(secured_server.url + "/api/schema/?format=json", headers=key).json()


def sse_events(text: str) -> list[dict]:
    events = []
    for block in filter(None, text.split("\n\n")):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append({"event": fields.get("event", "message"), "data": fields["data"]})
    return events


def validator(document: dict, pointer: str) -> Draft202012Validator:
    """A validator for one node of the document; its `#/components/...` refs resolve too."""
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:mlxlab", resource)
    return Draft202012Validator({"$ref": f"urn:mlxlab#{pointer}"}, registry=registry)


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@pytest.mark.parametrize(("path", "body"), STREAMS)
def test_streamed_events_match_the_schema(secured_server, live_schema, path, body):
    """Schemathesis checks each event's shape; the JSON inside each one is checked here."""
    stream = f"/paths/{escape(path)}/post/responses/200/content/text~1event-stream/schema"
    data = live_schema["paths"][path]["post"]["responses"]["200"]["content"]
    data = data["text/event-stream"]["schema"]["properties"]["data"]
    payload = (data.get("contentSchema") or data["anyOf"][0]["contentSchema"])["$ref"]
    response = httpx.post(
        secured_server.url + path,
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {secured_server.keys['member']}"},
        timeout=120,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert len(events) >= 3
    for event in events:
        validator(live_schema, stream).validate(event)
        if event["data"] != "[DONE]":
            validator(live_schema, payload.removeprefix("#")).validate(json.loads(event["data"]))
