"""The Hub stand-in, driven by the real huggingface_hub client (no Django, no database)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session

from tests.hub_standin import HubStandIn, git_blob_oid, use_plain_lfs

TOKEN, USER = "hf_standin_token", "tester"
OTHER_TOKEN, OTHER = "hf_other_token", "other"
BIG = 12 * 1024 * 1024  # above the Hub's 10 MB: the preupload answer says "lfs"
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def offline_client(monkeypatch, tmp_path):
    """The client as tests want it: online but only towards loopback, no telemetry, and
    neither the machine's login nor its model cache."""
    # These constants are read from the environment once, at import: patch the values.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # offline mode blocks every request
    # A token the stand-in does not know gets a 401, even for public repos, as on the Hub.
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "tokens"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {host}")  # e.g. huggingface.co: no internet
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


@pytest.fixture
def hub():
    with HubStandIn({TOKEN: USER, OTHER_TOKEN: OTHER}) as standin:
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
    pulled = hf_hub_download(
        repo_id,
        "weights.bin",
        repo_type=repo_type,
        local_dir=path.parent / "pulled",
        endpoint=hub.url,
        token=TOKEN,
    )
    assert Path(pulled).read_bytes() == files["weights.bin"]


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


# -- model repos to download


@pytest.fixture
def model_files():
    """A small model: regular files and, with `lfs_threshold` lowered to 1 MiB, an LFS one."""
    return {
        "config.json": b'{"model_type": "llama", "hidden_size": 64}\n',
        "tokenizer/vocab.txt": b"a\nb\nc\n",
        "model.safetensors": os.urandom(MIB + 12345),
    }


@pytest.fixture
def small_lfs(hub):
    hub.lfs_threshold = MIB  # keeps the LFS file small enough for a fast test


def test_list_models_filters_sorts_limits_and_fills_model_info(hub, api):
    hub.add_model_repo("acme/Llama-3B", {"a": b"1"}, library_name="mlx", downloads=50, likes=1)
    hub.add_model_repo("acme/llama-8b", {"a": b"2"}, library_name="mlx", downloads=900, likes=3)
    hub.add_model_repo("acme/llama-gguf", {"a": b"3"}, library_name="gguf", downloads=5000)
    hub.add_model_repo("other/llama-7b", {"a": b"4"}, library_name="mlx", downloads=100)
    hub.add_model_repo("acme/whisper", {"a": b"5"}, pipeline_tag="automatic-speech-recognition")
    hub.add_model_repo("acme/llama-secret", {"a": b"6"}, private=True, library_name="mlx")
    sha = hub.add_model_repo(
        "acme/llama-gated", {"a": b"7"}, gated="manual", library_name="mlx", tags=["mlx", "4-bit"]
    )

    def ids(**kwargs):
        return [model.id for model in HfApi(endpoint=hub.url, token=False).list_models(**kwargs)]

    assert ids(search="LLAMA", author="acme", filter="mlx", sort="downloads") == [
        "acme/llama-8b",
        "acme/Llama-3B",
        "acme/llama-gated",
    ]
    assert ids(search="llama", sort="downloads", limit=2) == ["acme/llama-gguf", "acme/llama-8b"]
    assert ids(pipeline_tag="automatic-speech-recognition") == ["acme/whisper"]
    assert ids(filter=["mlx", "4-bit"]) == ["acme/llama-gated"]
    assert ids(sort="last_modified", limit=1) == ["acme/llama-gated"]  # the newest first
    assert "acme/llama-secret" not in ids()  # private: only for its owner and grantees

    (gated,) = HfApi(endpoint=hub.url, token=False).list_models(search="gated")
    assert (gated.gated, gated.library_name, gated.pipeline_tag) == (
        "manual",
        "mlx",
        "text-generation",
    )
    assert (gated.tags, gated.private, gated.sha, gated.author) == (
        ["mlx", "4-bit"],
        False,
        sha,
        "acme",
    )
    assert (gated.downloads, gated.likes, gated.siblings) == (0, 0, None)
    assert isinstance(gated.last_modified, datetime) and isinstance(gated.created_at, datetime)
    (full,) = HfApi(endpoint=hub.url, token=False).list_models(search="gated", full=True)
    assert [sibling.rfilename for sibling in full.siblings] == ["a"]
    (expanded,) = HfApi(endpoint=hub.url, token=False).list_models(
        search="8b", expand=["downloads", "likes"]
    )
    assert (expanded.downloads, expanded.likes, expanded.library_name) == (900, 3, None)
    hub.grant("acme/llama-secret", USER)
    assert [model.id for model in api.list_models(search="secret")] == ["acme/llama-secret"]


def test_model_info_with_files_metadata_describes_regular_and_lfs_files(
    hub, api, model_files, small_lfs
):
    sha = hub.add_model_repo("acme/tiny", model_files, library_name="mlx", likes=7)
    weights = model_files["model.safetensors"]

    info = api.model_info("acme/tiny", files_metadata=True)

    assert (info.id, info.sha, info.library_name, info.likes, info.gated) == (
        "acme/tiny",
        sha,
        "mlx",
        7,
        False,
    )
    assert info.used_storage == sum(len(content) for content in model_files.values())
    siblings = {sibling.rfilename: sibling for sibling in info.siblings}
    assert sorted(siblings) == sorted(model_files)
    config = siblings["config.json"]
    assert (config.size, config.blob_id, config.lfs) == (
        len(model_files["config.json"]),
        git_blob_oid(model_files["config.json"]),
        None,
    )
    lfs = siblings["model.safetensors"].lfs
    assert siblings["model.safetensors"].size == lfs.size == len(weights)
    assert lfs.sha256 == hashlib.sha256(weights).hexdigest() and 120 < lfs.pointer_size < 140
    # Without files_metadata the Hub lists names only.
    assert api.model_info("acme/tiny").siblings[0].size is None
    assert api.model_info("acme/tiny", revision=sha).sha == sha
    with pytest.raises(RevisionNotFoundError):
        api.model_info("acme/tiny", revision="v9")


def test_list_repo_tree_and_paths_info(hub, api, model_files, small_lfs):
    hub.add_model_repo("acme/tiny", model_files)

    top = {entry.path: entry for entry in api.list_repo_tree("acme/tiny")}
    everything = [entry.path for entry in api.list_repo_tree("acme/tiny", recursive=True)]
    inside = [entry.path for entry in api.list_repo_tree("acme/tiny", path_in_repo="tokenizer")]
    info = api.get_paths_info("acme/tiny", ["model.safetensors", "tokenizer", "missing.bin"])

    assert sorted(top) == ["config.json", "model.safetensors", "tokenizer"]
    assert type(top["tokenizer"]).__name__ == "RepoFolder" and len(top["tokenizer"].tree_id) == 40
    weights = top["model.safetensors"]
    assert weights.lfs.sha256 == hashlib.sha256(model_files["model.safetensors"]).hexdigest()
    assert weights.size == weights.lfs.size == len(model_files["model.safetensors"])
    assert top["config.json"].blob_id == git_blob_oid(model_files["config.json"])
    assert everything == ["tokenizer", "config.json", "model.safetensors", "tokenizer/vocab.txt"]
    assert inside == ["tokenizer/vocab.txt"]
    assert [entry.path for entry in info] == ["model.safetensors", "tokenizer"]
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("acme/tiny", path_in_repo="nowhere"))


def test_hf_hub_download_of_regular_and_lfs_files(hub, model_files, small_lfs, tmp_path):
    sha = hub.add_model_repo("acme/tiny", model_files)
    hub.requests.clear()

    for name in ("config.json", "model.safetensors"):
        path = hf_hub_download(
            "acme/tiny",
            name,
            revision="main",
            local_dir=tmp_path / "model",
            endpoint=hub.url,
            token=TOKEN,
        )
        assert Path(path).read_bytes() == model_files[name]

    resolve = "/acme/tiny/resolve/main/"
    assert hub.requests == [
        ("HEAD", resolve + "config.json"),
        ("GET", resolve + "config.json"),
        ("HEAD", resolve + "model.safetensors"),
        ("GET", resolve + "model.safetensors"),
    ]
    assert hub.bytes_served == {
        ("acme/tiny", name): len(model_files[name]) for name in ("config.json", "model.safetensors")
    }
    # Asked again, the client checks the ETag and keeps its copy.
    hf_hub_download(
        "acme/tiny", "model.safetensors", local_dir=tmp_path / "model", endpoint=hub.url
    )
    assert hub.requests[-1] == ("HEAD", resolve + "model.safetensors")
    head = httpx.head(f"{hub.url}{resolve}model.safetensors")
    assert head.headers["X-Repo-Commit"] == sha and head.content == b""
    assert (
        head.headers["X-Linked-Etag"]
        == f'"{hashlib.sha256(model_files["model.safetensors"]).hexdigest()}"'
    )
    assert head.headers["X-Linked-Size"] == head.headers["Content-Length"] == str(MIB + 12345)


def test_snapshot_download_sees_an_update_and_old_revisions_still_resolve(hub, tmp_path):
    old = hub.add_model_repo("acme/tiny", {"config.json": b"{}", "weights.bin": b"old"})
    folder = snapshot_download("acme/tiny", local_dir=tmp_path / "old", endpoint=hub.url)
    assert Path(folder, "weights.bin").read_bytes() == b"old"

    new = hub.update_model_repo("acme/tiny", {"weights.bin": b"new!"}, delete=["config.json"])

    assert new != old and HfApi(endpoint=hub.url).model_info("acme/tiny").sha == new
    folder = snapshot_download("acme/tiny", local_dir=tmp_path / "new", endpoint=hub.url)
    assert sorted(os.listdir(folder)) == [".cache", "weights.bin"]
    assert Path(folder, "weights.bin").read_bytes() == b"new!"
    assert httpx.get(f"{hub.url}/acme/tiny/resolve/{old}/weights.bin").content == b"old"
    assert hub.repos[("model", "acme/tiny")]["commits"][-1]["deleted"] == ["config.json"]


def test_ranged_gets_answer_206_and_count_only_the_bytes_sent(hub, model_files, small_lfs):
    hub.add_model_repo("acme/tiny", model_files)
    weights, total = model_files["model.safetensors"], len(model_files["model.safetensors"])
    url = f"{hub.url}/acme/tiny/resolve/main/model.safetensors"

    tail = httpx.get(url, headers={"Range": f"bytes={total - 1000}-"})
    middle = httpx.get(url, headers={"Range": "bytes=100-199"})
    with get_session().stream("GET", url, headers={"Range": "bytes=-10"}) as streamed:
        last = b"".join(streamed.iter_bytes())

    assert tail.status_code == 206 and tail.content == weights[-1000:]
    assert tail.headers["Content-Range"] == f"bytes {total - 1000}-{total - 1}/{total}"
    assert tail.headers["Content-Length"] == "1000"
    assert middle.status_code == 206 and middle.content == weights[100:200]
    assert middle.headers["Content-Range"] == f"bytes 100-199/{total}"
    assert streamed.status_code == 206 and last == weights[-10:]
    assert hub.bytes_served == {("acme/tiny", "model.safetensors"): 1110}

    beyond = httpx.get(url, headers={"Range": f"bytes={total}-"})
    assert beyond.status_code == 416 and beyond.headers["Content-Range"] == f"bytes */{total}"
    assert hub.bytes_served == {("acme/tiny", "model.safetensors"): 1110}


def test_a_throttled_download_cut_off_stops_and_blocks_nobody(hub, api, model_files, small_lfs):
    hub.add_model_repo("acme/tiny", model_files)
    total = len(model_files["model.safetensors"])
    hub.throttle_bytes_per_second = 2 * MIB  # the file takes half a second
    url = f"{hub.url}/acme/tiny/resolve/main/model.safetensors"
    received, started, hang_up = [], threading.Event(), threading.Event()

    def download():
        with get_session().stream("GET", url) as response:
            for chunk in response.iter_bytes(64 * 1024):
                received.append(len(chunk))
                started.set()
                if hang_up.wait(5) and sum(received) >= 200_000:
                    return  # mid-file, like a killed client

    thread = threading.Thread(target=download)
    thread.start()
    assert started.wait(5)
    before = time.monotonic()
    assert api.model_info("acme/tiny").id == "acme/tiny"  # while the body is still going out
    assert time.monotonic() - before < 0.2  # a lock held over the body would take ~0.5 s
    hang_up.set()
    thread.join(5)
    time.sleep(0.6)  # long enough for the whole file, had the server not stopped

    served = hub.bytes_served[("acme/tiny", "model.safetensors")]
    assert sum(received) <= served < total


def test_gated_repo_needs_a_token_and_a_grant(hub, tmp_path):
    hub.add_model_repo("acme/gated", {"config.json": b"{}"}, gated=True)

    def download(token):
        return hf_hub_download(
            "acme/gated", "config.json", local_dir=tmp_path, endpoint=hub.url, token=token
        )

    with pytest.raises(GatedRepoError) as anonymous:
        download(False)
    with pytest.raises(GatedRepoError) as refused:
        download(TOKEN)
    hub.grant("acme/gated", USER)

    assert anonymous.value.response.status_code == 401
    assert anonymous.value.server_message == (
        "Access to model acme/gated is restricted. You must have access to it and be "
        "authenticated to access it. Please log in."
    )
    assert refused.value.response.status_code == 403
    assert "not in the authorized list" in refused.value.server_message
    assert Path(download(TOKEN)).read_bytes() == b"{}"
    assert HfApi(endpoint=hub.url, token=False).model_info("acme/gated").gated == "auto"
    assert hub.bytes_served == {("acme/gated", "config.json"): 2}


def test_private_repo_is_hidden_from_all_but_its_owner(hub, tmp_path):
    hub.add_model_repo("tester/private", {"config.json": b"{}"}, private=True)

    for token in (False, OTHER_TOKEN):
        with pytest.raises(RepositoryNotFoundError) as raised:
            hf_hub_download(
                "tester/private", "config.json", local_dir=tmp_path, endpoint=hub.url, token=token
            )
        assert raised.value.response.status_code == 404
        with pytest.raises(RepositoryNotFoundError):
            HfApi(endpoint=hub.url, token=token).model_info("tester/private")

    assert HfApi(endpoint=hub.url, token=TOKEN).model_info("tester/private").private is True
    assert (
        httpx.get(
            f"{hub.url}/tester/private/resolve/main/config.json",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ).content
        == b"{}"
    )


def test_missing_file_and_unknown_token(hub, tmp_path):
    sha = hub.add_model_repo("acme/tiny", {"config.json": b"{}"})

    with pytest.raises(EntryNotFoundError) as missing:
        hf_hub_download("acme/tiny", "nope.bin", local_dir=tmp_path, endpoint=hub.url)
    with pytest.raises(HfHubHTTPError) as bad_token:
        hf_hub_download(
            "acme/tiny", "config.json", local_dir=tmp_path, endpoint=hub.url, token="hf_wrong"
        )

    assert missing.value.response.status_code == 404
    assert missing.value.response.headers["X-Repo-Commit"] == sha
    assert bad_token.value.response.status_code == 401
    assert not (tmp_path / "config.json").exists()


def test_declared_sizes_change_what_the_metadata_claims_not_the_bytes(
    hub, api, model_files, small_lfs
):
    hub.add_model_repo("acme/huge", model_files)
    hub.declared_sizes[("acme/huge", "model.safetensors")] = 10**15
    url = f"{hub.url}/acme/huge/resolve/main/model.safetensors"

    info = api.model_info("acme/huge", files_metadata=True)
    (entry,) = api.get_paths_info("acme/huge", ["model.safetensors"])
    head, body = httpx.head(url), httpx.get(url)

    weights = {sibling.rfilename: sibling for sibling in info.siblings}["model.safetensors"]
    assert weights.size == weights.lfs.size == entry.size == entry.lfs.size == 10**15
    assert info.used_storage > 10**15
    assert head.headers["X-Linked-Size"] == str(10**15)
    assert body.content == model_files["model.safetensors"]
