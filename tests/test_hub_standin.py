"""The Hub stand-in, driven by the real huggingface_hub client (no Django, no database)."""

from __future__ import annotations

import hashlib
import os
import socket

import httpx
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from tests.hub_standin import HubStandIn, use_plain_lfs

TOKEN, USER = "hf_standin_token", "tester"
BIG = 12 * 1024 * 1024  # above the Hub's 10 MB: the preupload answer says "lfs"


@pytest.fixture(autouse=True)
def offline_client(monkeypatch):
    """The client as tests want it: online but only towards loopback, no telemetry."""
    # These constants are read from the environment once, at import: patch the values.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # offline mode blocks every request
    monkeypatch.delenv("HF_TOKEN", raising=False)
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {host}")  # e.g. huggingface.co: no internet
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


@pytest.fixture
def hub():
    with HubStandIn({TOKEN: USER}) as standin:
        yield standin


@pytest.fixture
def api(hub) -> HfApi:
    # Every call below takes its endpoint from here; none reads HF_ENDPOINT.
    return HfApi(endpoint=hub.url, token=TOKEN)


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    files = {
        "README.md": b"---\nlicense: apache-2.0\n---\n# A fine-tuned model\n",
        "config.json": b'{"model_type": "llama", "hidden_size": 64}\n',
    }
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return folder, files


def add_big_file(folder, files) -> None:
    content = os.urandom(BIG)
    (folder / "weights.bin").write_bytes(content)
    files["weights.bin"] = content


def test_whoami_answers_the_token_owner(hub, api):
    me = api.whoami()

    assert me["name"] == USER and me["type"] == "user"
    assert me["auth"]["accessToken"]["role"] == "write"
    assert hub.requests == [("GET", "/api/whoami-v2")]


def test_whoami_with_an_unknown_token_is_a_401(hub):
    with pytest.raises(HfHubHTTPError) as raised:
        HfApi(endpoint=hub.url, token="hf_wrong").whoami()

    # whoami() replaces the Hub's text with its own once the 401 is a bad token.
    assert raised.value.response.status_code == 401
    assert str(raised.value).startswith("Invalid user token.")


def test_create_repo_without_a_token_is_a_401_with_the_hubs_message(hub):
    with pytest.raises(HfHubHTTPError) as raised:
        HfApi(endpoint=hub.url, token=False).create_repo("tester/model")

    assert raised.value.response.status_code == 401
    assert raised.value.server_message == "Invalid credentials in Authorization header"
    assert hub.repos == {}


def test_create_repo_records_type_and_visibility(hub, api):
    model = api.create_repo("tester/model", repo_type="model", private=False, exist_ok=True)
    dataset = api.create_repo("tester/data", repo_type="dataset", private=True, exist_ok=True)

    assert model == f"{hub.url}/tester/model" and model.repo_type == "model"
    assert dataset == f"{hub.url}/datasets/tester/data" and dataset.repo_type == "dataset"
    assert hub.repos[("model", "tester/model")]["private"] is False
    assert hub.repos[("dataset", "tester/data")]["private"] is True


def test_create_repo_twice_with_exist_ok_keeps_the_repo(hub, api):
    first = api.create_repo("tester/model", exist_ok=True)
    second = api.create_repo("tester/model", exist_ok=True)  # the Hub's 409, swallowed

    assert first == second == f"{hub.url}/tester/model"
    assert list(hub.repos) == [("model", "tester/model")]
    assert hub.requests == [("POST", "/api/repos/create")] * 2
    with pytest.raises(HfHubHTTPError) as raised:
        api.create_repo("tester/model")  # without exist_ok the 409 reaches the caller
    assert raised.value.response.status_code == 409
    assert raised.value.server_message == "You already created this model repo"


def test_create_repo_in_a_forbidden_namespace_raises_the_hubs_403(hub, api):
    hub.forbidden_repos.add("someone-else/model")

    with pytest.raises(HfHubHTTPError) as raised:
        api.create_repo("someone-else/model", exist_ok=True)

    message = 'You don\'t have the rights to create a model under the namespace "someone-else"'
    assert raised.value.response.status_code == 403
    assert message in str(raised.value)
    # exist_ok makes the client look for the repo after a 403 before giving up.
    assert hub.requests == [
        ("POST", "/api/repos/create"),
        ("GET", "/api/models/someone-else/model"),
    ]


# lfs._upload_single_part PUTs with httpx2's deprecated `data=<file>`: the client's, not ours.
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
@pytest.mark.parametrize(
    ("repo_type", "private", "git_prefix"), [("model", False, ""), ("dataset", True, "/datasets")]
)
def test_upload_folder_through_lfs(hub, api, folder, monkeypatch, repo_type, private, git_prefix):
    use_plain_lfs(monkeypatch)
    path, files = folder
    add_big_file(path, files)
    repo_id = "tester/export"
    api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    hub.requests.clear()

    info = api.upload_folder(
        folder_path=path, repo_id=repo_id, repo_type=repo_type, commit_message="Export"
    )

    repo = hub.repos[(repo_type, repo_id)]
    assert repo["private"] is private
    assert repo["files"] == files  # byte-exact, the 12 MB one included
    assert repo["commits"] == [
        {"summary": "Export", "description": "", "files": sorted(files), "deleted": []}
    ]
    assert info.oid == repo["sha"] and info.commit_url.startswith(hub.url)
    oid = hashlib.sha256(files["weights.bin"]).hexdigest()
    api_repo = f"/api/{repo_type}s/{repo_id}"
    assert hub.requests == [
        ("POST", "/api/validate-yaml"),  # upload_folder, for README.md
        ("POST", "/api/validate-yaml"),  # create_commit, again
        ("POST", f"{api_repo}/preupload/main"),
        ("POST", f"{git_prefix}/{repo_id}.git/info/lfs/objects/batch"),
        ("PUT", f"/lfs-storage/{oid}"),
        ("POST", f"{git_prefix}/{repo_id}.git/info/lfs/objects/verify"),
        ("POST", f"{api_repo}/commit/main"),
    ]


def test_upload_folder_of_small_files_with_xet_on(hub, api, folder):
    """hf_xet installed: upload_folder takes the pipelined path; small files need no Xet."""
    path, files = folder
    api.create_repo("tester/small", exist_ok=True)
    hub.requests.clear()

    api.upload_folder(folder_path=path, repo_id="tester/small", commit_message="Small")
    api.upload_folder(folder_path=path, repo_id="tester/small", commit_message="Again")

    repo = hub.repos[("model", "tester/small")]
    assert repo["files"] == files
    # The preupload answer carries each file's oid: unchanged files make no second commit.
    assert [commit["summary"] for commit in repo["commits"]] == ["Small"]
    once = [
        ("POST", "/api/validate-yaml"),
        ("POST", "/api/models/tester/small/preupload/main"),
    ]
    assert hub.requests == [
        *once,
        ("POST", "/api/models/tester/small/commit/main"),
        *once,
        ("GET", "/api/models/tester/small/revision/main"),  # latest commit, for the result
    ]


def test_big_file_with_xet_on_stops_at_the_xet_token(hub, api, folder):
    """The client picks Xet on its own for "lfs" files; the stand-in refuses it at once."""
    path, files = folder
    add_big_file(path, files)
    api.create_repo("tester/xet", exist_ok=True)

    with pytest.raises(Exception, match="xet-write-token"):
        api.upload_folder(folder_path=path, repo_id="tester/xet", commit_message="Xet")

    assert hub.repos[("model", "tester/xet")]["commits"] == []


def test_upload_to_a_forbidden_repo_raises_the_hubs_403(hub, api, folder):
    api.create_repo("tester/locked")
    hub.forbidden_repos.add("tester/locked")

    with pytest.raises(HfHubHTTPError) as raised:
        api.upload_folder(folder_path=folder[0], repo_id="tester/locked", commit_message="No")

    assert raised.value.response.status_code == 403
    assert "pass `create_pr=1` as a query parameter" in str(raised.value)


def test_upload_to_a_missing_repo_is_repository_not_found(hub, api, folder):
    with pytest.raises(RepositoryNotFoundError) as raised:
        api.upload_folder(folder_path=folder[0], repo_id="tester/nowhere", commit_message="No")

    assert raised.value.response.status_code == 404


def test_failed_commit_raises_with_the_status(hub, api, folder):
    api.create_repo("tester/busy", repo_type="dataset")
    hub.fail_commit_with = 409

    with pytest.raises(HfHubHTTPError) as raised:
        api.upload_folder(
            folder_path=folder[0], repo_id="tester/busy", repo_type="dataset", commit_message="No"
        )

    assert raised.value.response.status_code == 409
    assert "A commit has happened since. Please refresh and try again." in str(raised.value)
    assert hub.repos[("dataset", "tester/busy")]["files"] == {}


def test_lfs_storage_rejects_bytes_that_do_not_match_the_oid(hub, api):
    api.create_repo("tester/lfs")
    content = b"the real bytes"
    oid = hashlib.sha256(content).hexdigest()
    batch = httpx.post(
        f"{hub.url}/tester/lfs.git/info/lfs/objects/batch",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={"operation": "upload", "objects": [{"oid": oid, "size": len(content)}]},
    ).json()
    href = batch["objects"][0]["actions"]["upload"]["href"]

    assert httpx.put(href, content=b"other bytes!!!").status_code == 400
    assert httpx.put(href, content=content).status_code == 200
    assert hub.lfs_objects == {oid: content}
