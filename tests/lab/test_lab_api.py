"""/api/conversations, /api/presets and /api/models as the lab's pages use them."""

from __future__ import annotations

import json
import re
import time

import pytest
from django.test import Client

from inference.management.commands.ensure_default_model import embedded_gguf
from inference.model_registry import model_register
from inference.models import LanguageModel
from lab.model_imports import PATH_REFUSED
from lab.models import Conversation, Message, Preset
from tests.conftest import DEFAULT_MODEL, THINKING_MODEL


@pytest.fixture
def client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def staff_client(db, django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("root", is_staff=True))
    return client


@pytest.fixture
def chat(alice) -> Conversation:
    conversation = Conversation.objects.create(owner=alice, title="Capitals", model=DEFAULT_MODEL)
    conversation.messages.create(role="user", content="Capital of France?")
    conversation.messages.create(role="assistant", content="Paris.", stats={"ttft_ms": 5})
    conversation.messages.create(role="user", content="And of Italy?")
    conversation.messages.create(role="assistant", content="Rome.")
    return conversation


def test_conversations_list_search_rename_delete(client, chat, alice, django_user_model):
    other = django_user_model.objects.create_user("bob")
    Conversation.objects.create(owner=other, title="Capitals of bob")
    listed = client.get("/api/conversations").json()["results"]
    assert [(c["id"], c["title"], c["message_count"]) for c in listed] == [(chat.id, "Capitals", 4)]
    assert client.get("/api/conversations?q=rome").json()["results"][0]["id"] == chat.id
    assert client.get("/api/conversations?q=berlin").json()["results"] == []
    renamed = client.patch(
        f"/api/conversations/{chat.id}", {"title": "Europe"}, content_type="application/json"
    )
    assert renamed.status_code == 200 and renamed.json()["title"] == "Europe"
    detail = client.get(f"/api/conversations/{chat.id}").json()
    assert [m["content"] for m in detail["messages"]] == [
        "Capital of France?", "Paris.", "And of Italy?", "Rome."
    ]  # fmt: skip
    assert detail["messages"][1]["stats"] == {"ttft_ms": 5}
    assert client.delete(f"/api/conversations/{chat.id}").status_code == 204
    assert not Message.objects.filter(conversation_id=chat.id).exists()
    assert client.get(f"/api/conversations/{chat.id}").status_code == 404


def test_branch_copies_up_to_a_message_and_delete_removes_one(client, chat):
    second = chat.messages.all()[1]
    branched = client.post(
        f"/api/conversations/{chat.id}/branch",
        {"message": second.id},
        content_type="application/json",
    )
    assert branched.status_code == 201
    copy = branched.json()
    assert copy["id"] != chat.id and copy["title"] == "Capitals (branch)"
    assert [m["content"] for m in copy["messages"]] == ["Capital of France?", "Paris."]
    assert chat.messages.count() == 4  # the original is untouched
    assert client.delete(f"/api/messages/{second.id}").status_code == 204
    assert chat.messages.count() == 3
    assert client.delete(f"/api/messages/{second.id}").status_code == 404


def test_a_conversation_exports_as_markdown_and_as_openai_messages(client, chat, django_user_model):
    chat.system_prompt = "Be brief."
    chat.save()
    markdown = client.get(f"/api/conversations/{chat.id}/export")  # Markdown by default
    assert markdown.status_code == 200 and markdown["Content-Type"].startswith("text/markdown")
    assert markdown["Content-Disposition"] == f'attachment; filename="capitals-{chat.id}.md"'
    text = markdown.content.decode()
    assert text.startswith("# Capitals\n") and "## System\n\nBe brief." in text
    assert text.index("Capital of France?") < text.index("Paris.") < text.index("Rome.")
    exported = client.get(f"/api/conversations/{chat.id}/export?as=json")
    assert exported["Content-Disposition"].endswith(f'capitals-{chat.id}.json"')
    assert exported.json() == {
        "model": DEFAULT_MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?"},
            {"role": "assistant", "content": "Rome."},
        ],
    }
    assert client.get(f"/api/conversations/{chat.id}/export?as=pdf").status_code == 400
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))
    assert bob.get(f"/api/conversations/{chat.id}/export").status_code == 404  # not his


@pytest.mark.parametrize(
    "path, body, detail",
    [
        ("/api/conversations", [1], "expected a JSON object"),
        ("/api/conversations", {"title": 5}, "title must be a string"),
        ("/api/conversations", {"colour": "red"}, "unknown field 'colour'"),
        ("/api/presets", {"name": ""}, "name must be 1 to 100 characters"),
        ("/api/presets", {"name": "x", "params": []}, "params must be an object"),
    ],
)
def test_bad_bodies_are_400s_with_a_reason(client, path, body, detail):
    answer = client.post(path, body, content_type="application/json")
    assert answer.status_code == 400 and answer.json() == {"detail": detail}


@pytest.mark.parametrize(
    "raw, detail",
    [
        ('{"name": "x", "params": {"temperature": NaN}}', "NaN is not a JSON number"),
        ('{"name": "x", "params": {"temperature": 1e999}}', "1e999 is out of range"),
        ('{"name": "x", "params": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests deeper"),
    ],
)
def test_unbounded_json_is_a_400_on_the_rest_api(client, raw, detail):
    answer = client.post("/api/presets", raw, content_type="application/json")
    assert answer.status_code == 400, answer.content[:200]
    assert detail in answer.json()["detail"]
    assert not Preset.objects.exists()


def test_branch_needs_a_message_of_that_conversation(client, chat, alice):
    elsewhere = Conversation.objects.create(owner=alice).messages.create(role="user", content="x")
    answer = client.post(
        f"/api/conversations/{chat.id}/branch", {"message": elsewhere.id}, "application/json"
    )
    assert answer.status_code == 400


def test_presets_are_per_user_and_saved_by_name(client, alice):
    body = {"name": "terse", "system_prompt": "Be brief.", "params": {"temperature": 0.2}}
    assert client.post("/api/presets", body, content_type="application/json").status_code == 201
    body["params"] = {"temperature": 0.5}
    client.post("/api/presets", body, content_type="application/json")
    presets = client.get("/api/presets").json()["results"]
    assert [(p["name"], p["params"]) for p in presets] == [("terse", {"temperature": 0.5})]
    assert client.delete(f"/api/presets/{presets[0]['id']}").status_code == 204
    assert not Preset.objects.filter(owner=alice).exists()


def test_models_list_and_details(client, registered_models):
    listed = {m["name"]: m for m in client.get("/api/models").json()["results"]}
    assert set(listed) == {DEFAULT_MODEL, THINKING_MODEL}
    assert listed[DEFAULT_MODEL]["default"] and listed[DEFAULT_MODEL]["architecture"] == "llama"
    assert listed[DEFAULT_MODEL]["context_length"] == 8192
    detail = client.get(f"/api/models/{DEFAULT_MODEL}").json()
    assert detail["config"]["model_type"] == "llama"
    assert "<|im_start|>" in detail["chat_template"]
    assert detail["supports_thinking"] is False
    assert detail["defaults"]["temperature"] == 0.0 and detail["defaults"]["max_tokens"] > 0
    assert client.get(f"/api/models/{THINKING_MODEL}").json()["supports_thinking"] is True
    assert client.get("/api/models/nope").status_code == 404


def strings(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return [value] if isinstance(value, str) else []


def test_a_member_sees_no_absolute_path_of_the_install(
    client, staff_client, registered_models, model_folder, settings, tmp_path
):
    """Issue 56: /api/models/{name} gave anyone the model's absolute folder."""
    # A converted model's config may carry the converting host's folder.
    copy = tmp_path / "models" / "copy"
    copy.mkdir(parents=True)
    for item in model_folder.iterdir():
        (copy / item.name).symlink_to(item)
    (copy / "config.json").unlink()
    config = {**json.loads((model_folder / "config.json").read_text()), "_name_or_path": "/x/y"}
    (copy / "config.json").write_text(json.dumps(config))
    settings.MLXLAB = settings.MLXLAB.replace(models_dir=tmp_path / "models")
    model_register(name="copy", path=copy)
    answers = [client.get("/api/models")]
    answers += [client.get(f"/api/models/{name}") for name in (DEFAULT_MODEL, THINKING_MODEL)]
    answers.append(client.get("/api/models/copy"))
    for answer in answers:
        assert answer.status_code == 200
        shown = strings(answer.json())
        assert not [text for text in shown if text.startswith("/")], shown
        assert str(settings.BASE_DIR) not in answer.content.decode()
    assert answers[-1].json()["path"] == "copy"  # under the models folder: its place there
    assert answers[2].json()["path"] is None  # elsewhere: nothing
    assert answers[-1].json()["config"]["_name_or_path"] is None
    staff = staff_client.get("/api/models/copy").json()
    assert staff["path"] == str(copy) and staff["config"]["_name_or_path"] == "/x/y"


def test_model_management_is_staff_only(client, registered_models):
    assert client.post(f"/api/models/{DEFAULT_MODEL}/unload").status_code == 403
    answer = client.post("/api/models/import", {"path": "/x.gguf"}, "application/json")
    assert answer.status_code == 403


@pytest.mark.parametrize(
    "body, detail",
    [
        ({}, "path required"),
        ({"path": "relative.gguf"}, PATH_REFUSED),
        ({"path": "/no/such/file.gguf"}, PATH_REFUSED),
        ({"path": __file__}, PATH_REFUSED),
        ({"path": str(embedded_gguf()), "name": DEFAULT_MODEL}, "already exists"),
        ({"path": str(embedded_gguf()), "name": "bad name!"}, "name must use only"),
    ],
)
def test_import_refusals(staff_client, registered_models, body, detail):
    answer = staff_client.post("/api/models/import", body, "application/json")
    assert answer.status_code == 400 and detail in answer.json()["detail"]


def test_an_import_outside_the_roots_is_refused_alike(staff_client, settings, tmp_path):
    """Issue 56: the import told whether a server path existed, and followed a *.gguf link
    anywhere. Outside MLXLAB_IMPORT_ROOTS (links resolved) every answer is the same."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "model.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    (root / "link.gguf").symlink_to(outside / "model.gguf")
    settings.MLXLAB = settings.MLXLAB.replace(import_roots=(root,))
    answers = [
        staff_client.post("/api/models/import", {"path": str(path)}, "application/json")
        for path in (outside / "model.gguf", outside / "missing.gguf", root / "link.gguf")
    ]
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert [a.json() for a in answers] == [{"detail": PATH_REFUSED}] * 3


@pytest.mark.django_db(transaction=True)  # the import thread writes through its own connection
def test_import_a_gguf_with_progress(staff_client, settings, tmp_path):
    settings.MLXLAB = settings.MLXLAB.replace(models_dir=tmp_path)
    started = staff_client.post(
        "/api/models/import",
        {"path": str(embedded_gguf()), "name": "smol-copy"},
        "application/json",
    )
    assert started.status_code == 202 and started.json()["status"] == "running"
    url = f"/api/models/imports/{started.json()['id']}"
    progress = [started.json()["progress"]]
    for _ in range(600):
        state = staff_client.get(url).json()
        progress.append(state["progress"])
        if state["status"] != "running":
            break
        time.sleep(0.1)
    assert state["status"] == "succeeded", state
    assert state["model"] == "smol-copy" and progress == sorted(progress) and progress[-1] == 1.0
    record = LanguageModel.objects.get(name="smol-copy")
    assert record.path == str(tmp_path / "smol-copy") and record.size_bytes > 50_000_000


def test_a_failed_import_says_why(staff_client, registered_models, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    started = staff_client.post("/api/models/import", {"path": str(broken)}, "application/json")
    url = f"/api/models/imports/{started.json()['id']}"
    for _ in range(100):
        state = staff_client.get(url).json()
        if state["status"] != "running":
            break
        time.sleep(0.05)
    assert state["status"] == "failed" and state["error"]
    assert not LanguageModel.objects.filter(name="broken").exists()


def test_pages_need_a_login_and_api_needs_csrf(db, alice, chat):
    anonymous = Client()
    for page in ["/", "/models/", "/settings/"]:
        answer = anonymous.get(page)
        assert answer.status_code == 302 and answer["Location"] == f"/login/?next={page}"
    assert anonymous.get("/api/conversations").status_code in (401, 403)
    browser = Client(enforce_csrf_checks=True)
    login = browser.get("/login/")
    token = login.cookies["csrftoken"].value
    answer = browser.post(
        "/login/", {"username": "alice", "password": "alice-password", "csrfmiddlewaretoken": token}
    )
    assert answer.status_code == 302 and answer["Location"] == "/"
    page = browser.get("/")
    assert page.status_code == 200
    token = browser.cookies["csrftoken"].value
    url = f"/api/conversations/{chat.id}"
    assert browser.delete(url).status_code == 403  # no CSRF header
    assert browser.delete(url, headers={"X-CSRFToken": token}).status_code == 204


@pytest.mark.parametrize(("path", "button"), [("/", "send-button"), ("/side-by-side/", "sbs-send")])
def test_the_send_buttons_start_disabled_until_the_script_handles_the_form(client, path, button):
    # A click before the page's module loads would submit the form natively, reload the
    # page and lose the message; the script enables the button (the browser tests click it).
    html = client.get(path).content.decode()
    tag = re.search(rf'<button id="{button}"[^>]*>', html)
    assert tag is not None and " disabled" in tag.group(0), tag
