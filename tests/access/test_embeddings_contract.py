"""/v1/embeddings' and /v1/rerank's contract: the same key check as the rest of /v1
(api_endpoint), and their input bounds (MLXLAB_EMBEDDING_*) published in the OpenAPI
schema as the server has them."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from django.contrib.auth.models import User

from tests.conftest import DEFAULT_MODEL


def test_embeddings_need_a_key_once_keys_exist(secured_server):
    url = f"{secured_server.url}/v1/embeddings"
    refused = httpx.post(url, json={"input": "Hi"}, timeout=60)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    client = openai.OpenAI(
        base_url=f"{secured_server.url}/v1", api_key=secured_server.keys["member"], max_retries=0
    )
    # Past the key check: the default model is a chat model, so the answer is its 400.
    with pytest.raises(openai.BadRequestError, match="cannot create embeddings"):
        client.embeddings.create(model=DEFAULT_MODEL, input="Hi")


def test_the_schema_publishes_the_servers_input_bounds(client, db, settings):
    settings.MLXLAB = settings.MLXLAB.replace(embedding_max_inputs=7, embedding_max_input_tokens=11)
    client.force_login(User.objects.get_or_create(username="schema-reader")[0])
    document = json.loads(client.get("/api/schema/?format=json").content)
    _text, strings, tokens, token_lists = document["components"]["schemas"]["EmbeddingRequest"][
        "properties"
    ]["input"]["anyOf"]
    assert strings["maxItems"] == token_lists["maxItems"] == 7
    assert tokens["maxItems"] == token_lists["items"]["maxItems"] == 11
    operation = document["paths"]["/v1/embeddings"]["post"]
    assert {"200", "400", "401", "404", "502"} <= set(operation["responses"])


def test_rerank_needs_a_key_once_keys_exist(secured_server):
    url = f"{secured_server.url}/v1/rerank"
    body = {"model": DEFAULT_MODEL, "query": "q", "documents": ["d"]}
    refused = httpx.post(url, json=body, timeout=60)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    headers = {"Authorization": f"Bearer {secured_server.keys['member']}"}
    # Past the key check: the default model is a chat model, so the answer is its 400.
    answered = httpx.post(url, json=body, headers=headers, timeout=60)
    assert answered.status_code == 400
    assert "cannot rerank" in answered.json()["error"]["message"]


def test_the_schema_publishes_the_rerank_bounds(client, db, settings):
    settings.MLXLAB = settings.MLXLAB.replace(embedding_max_inputs=7)
    client.force_login(User.objects.get_or_create(username="schema-reader")[0])
    document = json.loads(client.get("/api/schema/?format=json").content)
    request = document["components"]["schemas"]["RerankRequest"]
    assert request["properties"]["documents"]["maxItems"] == 7
    assert set(request["required"]) == {"query", "documents"}
    operation = document["paths"]["/v1/rerank"]["post"]
    assert {"200", "400", "401", "404", "502"} <= set(operation["responses"])
