"""A local stand-in for the Hugging Face Hub, speaking the HTTP the real client sends.

It answers what huggingface_hub 2.4.0 sends to push (`HfApi.whoami`, `.create_repo`,
`.upload_folder`) and to find and download models (`HfApi.list_models`, `.model_info`,
`.list_repo_tree`, `.get_paths_info`, `hf_hub_download`, `snapshot_download`, and plain or
ranged GETs of `/{repo}/resolve/{revision}/{path}`), with the Hub's response shapes, headers
and error codes, and records what arrived. Only 127.0.0.1, on an ephemeral port; nothing goes
to huggingface.co.

Repos to download are seeded with `add_model_repo` and changed with `update_model_repo`. Every
commit keeps its snapshot, so a revision pinned to an older sha still resolves. Access: a
private repo is visible to the user named by its namespace and to `grants[repo_id]`, and looks
missing (404 RepoNotFound) to everyone else, as on the Hub; a gated repo's metadata is public,
but its files need a token whose user is in `grants[repo_id]` (401 GatedRepo without a token,
403 GatedRepo without a grant). Unlike the Hub, a gated repo's owner gets no pass, so a test
can play both sides with one token. A token the stand-in does not know is refused with a 401
on every call that carries one, as the Hub does, public repos included. `bytes_served` counts
the body bytes written per file, `throttle_bytes_per_second` slows file bodies down so a test
can stop a client mid-download, and `declared_sizes` makes the metadata claim another size.

Xet: the client never asks the server whether to use Xet. `upload_folder` and
`_commit_api._upload_files` check `is_xet_available()` (hf_xet importable and not
`constants.HF_HUB_DISABLE_XET`) and, if so, send every file the preupload answer calls
"lfs" through hf_xet's own CAS protocol, which this stand-in does not speak: it answers
the `xet-write-token` call 501, and hf_xet fails at once with a ConnectionError naming that
URL. Files at or below `lfs_threshold` are "regular" and travel inside the commit, so they
work either way; for the LFS path, turn Xet off in the client with `use_plain_lfs`.
Downloads never use Xet: the client only does when a resolve answer carries `X-Xet-Hash`,
and this stand-in sends none, so LFS files come as plain HTTP bodies.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import re
import secrets
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub's: bigger files must go through LFS
CHUNK = 64 * 1024  # file bodies go out in pieces, so a throttle or a hang-up acts mid-file
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
REPO = r"(?P<repo>[^/]+/[^/]+)"
API_REPO = r"^/api/(?P<type>model|dataset|space)s/" + REPO
GIT_REPO = r"^/(?:(?P<type>dataset|space)s/)?" + REPO + r"\.git/info/lfs/objects/"
RESOLVE = r"^/(?:(?P<type>dataset|space)s/)?" + REPO + r"/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"
COMMIT_ERRORS = {  # the Hub's own words for the statuses tests ask the commit to fail with
    409: "A commit has happened since. Please refresh and try again.",
    500: "Internal Error - We're working hard to fix this as soon as possible!",
}
GATED = {False: False, True: "auto", "auto": "auto", "manual": "manual"}  # the Hub's values
SORTS = {  # list_models `sort` -> the repo key it orders by, descending unless direction=1
    "trendingScore": "trending_score",
    "downloads": "downloads",
    "likes": "likes",
    "lastModified": "last_modified",
    "createdAt": "created_at",
}


def use_plain_lfs(monkeypatch) -> None:
    """Make the client take the LFS batch path instead of Xet (see the module docstring).

    `is_xet_available()` reads `constants.HF_HUB_DISABLE_XET` on every call, so patching the
    constant works after import; setting the HF_HUB_DISABLE_XET variable only counts if it is
    set before huggingface_hub is first imported.
    """
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


def git_blob_oid(content: bytes) -> str:
    # What `CommitOperationAdd._local_oid` computes for a regular file (sha.git_hash).
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclasses.dataclass(frozen=True)
class Blob:
    """How the Hub describes a stored file: `oid` is the git blob id, which for an LFS file is
    that of its pointer file; `sha256` and `pointer_size` are set for LFS files only."""

    size: int
    oid: str
    sha256: str | None = None
    pointer_size: int | None = None


def _describe(content: bytes, lfs: bool) -> Blob:
    if not lfs:
        return Blob(len(content), git_blob_oid(content))
    sha256 = hashlib.sha256(content).hexdigest()
    pointer = LFS_POINTER.format(sha256=sha256, size=len(content)).encode()
    return Blob(len(content), git_blob_oid(pointer), sha256, len(pointer))


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # the Hub's millisecond format


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")  # httpx sends Python booleans as "true"


def _byte_range(header: str, total: int) -> tuple[int, int] | None:
    """The [start, end) slice a `Range` header asks for; None when the header is to be ignored
    (not one single byte range: RFC 9110 lets a server answer 200 then); ValueError when no
    byte of it exists (416)."""
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if match is None or match[1] == match[2] == "":
        return None
    if match[1] == "":  # "bytes=-N": the last N bytes
        if int(match[2]) == 0 or total == 0:
            raise ValueError(header)
        return max(0, total - int(match[2])), total
    start = int(match[1])
    if match[2] and int(match[2]) < start:
        return None  # an invalid range, which RFC 9110 says to ignore
    if start >= total:
        raise ValueError(header)
    return start, min(int(match[2]) + 1 if match[2] else total, total)


@dataclasses.dataclass
class _File:
    """A resolve answer: the handler sends it, range and all, once the lock is released."""

    content: bytes
    headers: dict[str, str]
    key: tuple[str, str]  # (repo_id, path) in `bytes_served`


def _locked(endpoint):
    # Endpoints only read and write the stand-in's dicts; whatever takes time (delays, file
    # bodies) runs outside the lock, so a slow request never holds the others up.
    @functools.wraps(endpoint)
    def locked(self, *args):
        with self._lock:
            return endpoint(self, *args)

    return locked


class HubError(Exception):
    """An error answer in the Hub's shape: JSON `{"error": ...}` (plus `extra` keys) and,
    unless `header=False`, the `X-Error-Message` header; `code` becomes `X-Error-Code`.
    `hf_raise_for_status` reads both to pick the typed error and build its message."""

    def __init__(self, status: int, message: str, code: str | None = None, header=True, **extra):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers = {"X-Error-Message": message} if header else {}
        if code:
            self.headers["X-Error-Code"] = code
        self.payload = {"error": message, **extra}


class HubStandIn:
    """The Hub on 127.0.0.1: `start()`, point `HfApi(endpoint=.url)` at it, read what arrived
    in `.repos` and `.requests` ([(method, path)]).

    `.repos[(repo_type, repo_id)]` holds "files" ({path: bytes} at the head), "sha" (the head
    commit), "revisions" ({sha: files} for every commit), "commits" ([{"summary",
    "description", "files", "deleted"}]), "private", and the listing metadata "gated" (False,
    "auto" or "manual"), "library_name", "pipeline_tag", "tags", "downloads", "likes",
    "trending_score", "created_at" and "last_modified" (datetimes); tests may change these.
    """

    def __init__(self, tokens: dict[str, str] | None = None) -> None:
        self.tokens = dict(tokens or {"hf_standin_token": "tester"})  # token -> user name
        self.repos: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.forbidden_repos: set[str] = set()  # repo ids: create and push answer 403
        self.grants: dict[str, set[str]] = {}  # repo id -> users who may read it (gated/private)
        # HTTP status every commit answers while set. With hf_xet installed, upload_folder
        # retries 408/429/5xx commits 5 times with backoff (~23 s); others fail at once.
        self.fail_commit_with: int | None = None
        self.preupload_delay = 0.0  # seconds before answering a preupload: a slow upload
        self.lfs_threshold = LFS_THRESHOLD
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> bytes received by the storage PUT
        self.bytes_served: dict[tuple[str, str], int] = {}  # (repo_id, path) -> body bytes sent
        self.throttle_bytes_per_second: float | None = None  # file bodies go no faster when set
        # (repo_id, path) -> the size the metadata claims (siblings, tree, the HEAD's
        # X-Linked-Size of an LFS file): a file too big for the disk without storing one.
        # Bodies and Content-Length stay the real ones.
        self.declared_sizes: dict[tuple[str, str], int] = {}
        self._secret = secrets.token_hex(16)  # signs the storage hrefs, like S3 presigning
        self._lock = threading.Lock()
        self._stopped = threading.Event()  # cuts off file bodies still streaming at stop()
        self._last_time: datetime | None = None
        self._blobs: dict[tuple[int, bool], tuple[bytes, Blob]] = {}
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle

    def start(self) -> HubStandIn:
        standin = self

        class Handler(_Handler):
            hub = standin

        self._stopped.clear()
        self._server = _Server(("127.0.0.1", 0), Handler)
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> HubStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def repo_url(self, repo_type: str, repo_id: str) -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{self.url}/{prefix}{repo_id}"

    # -- seeding repos to download

    def add_model_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        gated: bool | Literal["auto", "manual"] = False,
        private: bool = False,
        library_name: str | None = None,
        pipeline_tag: str | None = "text-generation",
        tags: Iterable[str] = (),
        downloads: int = 0,
        likes: int = 0,
    ) -> str:
        """Create a model repo holding `files` in one commit; returns its sha. Files bigger
        than `lfs_threshold` are described as LFS files, the others as regular git blobs.
        `gated=True` means "auto"; either way only `grants[repo_id]` may download."""
        self._hash(files)
        with self._lock:
            if ("model", repo_id) in self.repos:
                raise ValueError(f"{repo_id} exists already: update_model_repo changes it")
            repo = self._new_repo(
                private,
                gated=GATED[gated],
                library_name=library_name,
                pipeline_tag=pipeline_tag,
                tags=list(tags),
                downloads=downloads,
                likes=likes,
            )
            self.repos[("model", repo_id)] = repo
            return self._commit(repo, dict(files), [], "Initial commit")

    def update_model_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        delete: Iterable[str] = (),
        message: str = "Update",
    ) -> str:
        """Commit to a model repo: `files` added or replaced, `delete` paths (or folders)
        removed, the rest kept. Returns the new sha; the old one still resolves."""
        self._hash(files)
        with self._lock:
            repo = self.repos[("model", repo_id)]
            return self._commit(repo, dict(files), list(delete), message)

    def grant(self, repo_id: str, user: str) -> None:
        """Let `user` read the gated or private repo `repo_id`."""
        with self._lock:
            self.grants.setdefault(repo_id, set()).add(user)

    def blob(self, content: bytes, repo_id: str | None = None, path: str | None = None) -> Blob:
        """How the Hub describes `content` as a file, under the current `lfs_threshold`; with
        `repo_id` and `path`, at the size `declared_sizes` claims for it, if any."""
        lfs = len(content) > self.lfs_threshold
        # Cached so a model file is hashed once, not on every HEAD, listing and info call.
        # Keyed by identity (contents are immutable); the entry keeps the object alive, so
        # its id cannot pass to another.
        cached = self._blobs.get((id(content), lfs))
        if cached is None:
            cached = self._blobs[(id(content), lfs)] = (content, _describe(content, lfs))
        blob = cached[1]
        if (size := self.declared_sizes.get((repo_id, path))) is not None:
            blob = dataclasses.replace(blob, size=size)
        return blob

    # -- endpoints: each gets (user, path and query parameters, body), returns (status, answer)

    def whoami(self, user, m, body):
        # The fields of /api/whoami-v2 the client and our code read.
        return 200, {
            "type": "user",
            "id": hashlib.md5(user.encode()).hexdigest()[:24],
            "name": user,
            "fullname": user.title(),
            "orgs": [],
            "auth": {
                "type": "access_token",
                "accessToken": {"displayName": "stand-in token", "role": "write"},
            },
        }

    @_locked
    def create_repo(self, user, m, body):
        # create_repo posts {"name", "organization", "type", "visibility"}; 2.4.0 sends
        # visibility "private"/"public" (older clients sent "private": bool).
        data = json.loads(body)
        repo_type = data.get("type") or "model"
        repo_id = f"{data.get('organization') or user}/{data['name']}"
        if repo_id in self.forbidden_repos:
            namespace = repo_id.split("/")[0]
            raise HubError(
                403,
                f'You don\'t have the rights to create a {repo_type} under the namespace "{namespace}"',
            )
        url = self.repo_url(repo_type, repo_id)
        if (repo_type, repo_id) in self.repos:
            # With exist_ok=True the client swallows this 409, then returns RepoUrl(body["url"]):
            # the Hub's 409 body carries the url. No X-Error-* headers on this one.
            raise HubError(409, f"You already created this {repo_type} repo", header=False, url=url)
        private = data.get("visibility") == "private" or data.get("private") is True
        self.repos[(repo_type, repo_id)] = self._new_repo(private)
        return 200, {"url": url, "name": repo_id, "id": secrets.token_hex(12)}

    def validate_yaml(self, user, m, body):
        # upload_folder posts README.md here first (`_validate_yaml`); metadata is accepted.
        return 200, {"errors": [], "warnings": []}

    @_locked
    def list_models(self, user, m, body):
        # list_models sends search, author, filter (repeated: tags, library, pipeline),
        # pipeline_tag, gated, sort, limit, full and expand (repeated); browsers say expand[].
        query = m["_query"]
        search, author = (m.get("search") or "").lower(), m.get("author")
        filters = query.get("filter", [])
        sort = m.get("sort") or "trendingScore"
        if sort not in SORTS:
            raise HubError(400, f'Invalid sort "{sort}", expected one of {", ".join(SORTS)}')
        found = []
        for (repo_type, repo_id), repo in self.repos.items():
            labels = {*repo["tags"], repo["library_name"], repo["pipeline_tag"]}
            if (
                repo_type != "model"
                or (repo["private"] and not self._may_read(repo_id, user))
                or search not in repo_id.lower()
                or (author and repo_id.split("/")[0] != author)
                or any(label not in labels for label in filters)
                or ("library" in m and repo["library_name"] != m["library"])
                or ("pipeline_tag" in m and repo["pipeline_tag"] != m["pipeline_tag"])
                or ("gated" in m and bool(repo["gated"]) != _flag(m["gated"]))
            ):
                continue
            found.append((repo_id, repo))
        # Stable, so ties keep the order repos were added in.
        found.sort(key=lambda hit: hit[1][SORTS[sort]], reverse=m.get("direction") != "1")
        if "limit" in m:
            found = found[: int(m["limit"])]
        expand = query.get("expand", []) + query.get("expand[]", [])
        siblings = _flag(m.get("full")) or "siblings" in expand
        entries = [
            self._entry("model", repo_id, repo, repo["sha"], repo["files"], siblings=siblings)
            for repo_id, repo in found
        ]
        return 200, [_expanded(entry, expand) for entry in entries]

    @_locked
    def repo_info(self, user, m, body):
        # model_info/repo_info, and create_repo(exist_ok=True) after a 401/402/403 to see if the
        # repo exists. `blobs=true` (files_metadata=True) adds sizes and oids to the siblings.
        repo = self._read_repo(m, user)
        sha, files = self._revision(repo, m.get("rev") or "main")
        blobs = _flag(m.get("blobs"))
        entry = self._entry(m["type"], m["repo"], repo, sha, files, siblings=True, blobs=blobs)
        query = m["_query"]
        return 200, _expanded(entry, query.get("expand", []) + query.get("expand[]", []))

    @_locked
    def tree(self, user, m, body):
        # list_repo_tree quotes the folder as one segment (a%2Fb); the Hub takes raw slashes too.
        repo = self._read_repo(m, user)
        rev = m["rev"]
        _, files = self._revision(repo, rev)
        folder = (m.get("path") or "").strip("/")
        prefix = f"{folder}/" if folder else ""
        under = sorted(path for path in files if path.startswith(prefix))
        if folder and not under:
            if folder in files:
                return 200, [self._path_info(m["repo"], files, folder)]
            raise HubError(404, f'"{folder}" does not exist on "{rev}"', code="EntryNotFound")
        folders, file_paths = set(), []
        for path in under:
            parts = path[len(prefix) :].split("/")
            if _flag(m.get("recursive")):
                folders.update(prefix + "/".join(parts[:i]) for i in range(1, len(parts)))
                file_paths.append(path)
            elif len(parts) > 1:
                folders.add(prefix + parts[0])
            else:
                file_paths.append(path)
        paths = sorted(folders) + file_paths  # the Hub lists folders first
        return 200, [self._path_info(m["repo"], files, path) for path in paths]

    @_locked
    def paths_info(self, user, m, body):
        # get_paths_info posts a form (paths=a&paths=b&expand=false); the Hub also takes JSON.
        repo = self._read_repo(m, user)
        _, files = self._revision(repo, m["rev"])
        if body.lstrip().startswith(b"{"):
            paths = json.loads(body).get("paths", [])
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        answers = [self._path_info(m["repo"], files, path.strip("/")) for path in paths]
        return 200, [answer for answer in answers if answer is not None]  # missing: left out

    @_locked
    def resolve(self, user, m, body):
        # hf_hub_download HEADs first: X-Repo-Commit, the ETag (or X-Linked-Etag) and the size
        # (X-Linked-Size or Content-Length) are what it reads; then it GETs the same URL.
        repo_type, repo_id = m["type"] or "model", m["repo"]
        repo = self._read_repo(m, user)
        if repo["gated"] and user not in self.grants.get(repo_id, ()):
            page = repo_id if repo_type == "model" else f"{repo_type}s/{repo_id}"
            if user is None:
                message = (
                    f"Access to {repo_type} {repo_id} is restricted. You must have access to it "
                    "and be authenticated to access it. Please log in."
                )
                raise HubError(401, message, code="GatedRepo")
            message = (
                f"Access to {repo_type} {repo_id} is restricted and you are not in the authorized "
                f"list. Visit https://huggingface.co/{page} to ask for access."
            )
            raise HubError(403, message, code="GatedRepo")
        sha, files = self._revision(repo, m["rev"])
        headers = {"X-Repo-Commit": sha}
        if (content := files.get(m["path"])) is None:
            error = HubError(404, "Entry not found", code="EntryNotFound")
            error.headers |= headers  # the client caches the miss under this commit (.no_exist)
            raise error
        blob = self.blob(content, repo_id, m["path"])
        headers |= {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if blob.sha256:
            # The Hub answers LFS files with a redirect to its CDN, whose ETag means nothing to
            # the client: X-Linked-* carry the file's sha256 and size. Here the bytes come from
            # this same URL, so the ETag can be the sha256 too.
            etag = f'"{blob.sha256}"'
            headers |= {"ETag": etag, "X-Linked-Etag": etag, "X-Linked-Size": str(blob.size)}
        else:
            headers["ETag"] = f'"{blob.oid}"'
        return 200, _File(content, headers, (repo_id, m["path"]))

    def preupload(self, user, m, body):
        if self.preupload_delay:
            time.sleep(self.preupload_delay)
        # `_fetch_upload_modes` needs path, uploadMode ("lfs"/"regular") and shouldIgnore per
        # file, and reads "oid" (of the file already in the repo) to skip unchanged files.
        with self._lock:
            repo = self._repo(m)
            answers = []
            for file in json.loads(body)["files"]:
                mode = "lfs" if file["size"] > self.lfs_threshold else "regular"
                answer = {"path": file["path"], "uploadMode": mode, "shouldIgnore": False}
                if (old := repo["files"].get(file["path"])) is not None:
                    blob = self.blob(old)
                    answer["oid"] = blob.sha256 or blob.oid
                answers.append(answer)
            return 200, {"files": answers, "commitOid": repo["sha"]}

    @_locked
    def commit(self, user, m, body):
        # `_send_commit` posts NDJSON: a "header" line, then "file" (base64 content),
        # "lfsFile" (sha256 oid of a blob pushed through the LFS batch API), "deletedFile"
        # and "deletedFolder" lines.
        repo = self._repo(m)
        if self.fail_commit_with is not None:
            status = self.fail_commit_with
            raise HubError(status, COMMIT_ERRORS.get(status, f"HTTP {status} from the stand-in"))
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header, files, deleted = {}, {}, []
        for line in lines:
            key, value = line["key"], line["value"]
            if key == "header":
                header = value
            elif key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                if value["oid"] not in self.lfs_objects:
                    raise HubError(
                        422,
                        "Your push was rejected because an LFS pointer pointed to a file that "
                        f"does not exist. Offending file: - {value['path']}",
                    )
                files[value["path"]] = self.lfs_objects[value["oid"]]
            elif key in ("deletedFile", "deletedFolder"):
                deleted.append(value["path"])
        sha = self._commit(repo, files, deleted, header.get("summary"), header.get("description"))
        url = f"{self.repo_url(m['type'], m['repo'])}/commit/{sha}"
        # CommitInfo reads exactly these three keys (`_send_commit`).
        return 200, {"commitOid": sha, "commitUrl": url, "pullRequestUrl": None}

    def xet_token(self, user, m, body):
        raise HubError(
            501,
            "The Hub stand-in does not speak Xet: call use_plain_lfs(monkeypatch) "
            "(HF_HUB_DISABLE_XET) or keep files under lfs_threshold.",
        )

    @_locked
    def lfs_batch(self, user, m, body):
        # `post_lfs_batch_info` offers transfers ["basic", "multipart"]; answering "basic" with
        # no `header.chunk_size` makes `lfs_upload` do one PUT to the href, without the Hub
        # token, as to a presigned S3 URL: the href carries its own signature.
        self._repo(m)
        objects = []
        for obj in json.loads(body)["objects"]:
            answer = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.lfs_objects:  # no "actions": already stored, skipped
                query = f"size={obj['size']}&signature={self._sign(obj['oid'], obj['size'])}"
                git = self.repo_url(m["type"] or "model", m["repo"]) + ".git"
                answer["actions"] = {
                    "upload": {"href": f"{self.url}/lfs-storage/{obj['oid']}?{query}"},
                    "verify": {"href": f"{git}/info/lfs/objects/verify"},
                }
            objects.append(answer)
        return 200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}

    @_locked
    def lfs_storage_put(self, user, m, body):
        # The storage side of the presigned URL: S3 rejects a body whose sha256 or size
        # does not match what was signed.
        oid, size = m["oid"], m.get("size", "")
        if m.get("signature") != self._sign(oid, size):
            raise HubError(403, "SignatureDoesNotMatch", header=False)
        if str(len(body)) != size or hashlib.sha256(body).hexdigest() != oid:
            raise HubError(400, "XAmzContentSHA256Mismatch", header=False)
        self.lfs_objects[oid] = body
        return 200, None

    @_locked
    def lfs_verify(self, user, m, body):
        obj = json.loads(body)
        stored = self.lfs_objects.get(obj["oid"])
        if stored is None or len(stored) != obj["size"]:
            raise HubError(404, "Object not found", header=False)
        return 200, {"success": True}

    def _hash(self, files: Mapping[str, bytes]) -> None:
        # Done before taking the lock: hashing a big model file takes a while.
        for content in files.values():
            self.blob(content)

    # -- bookkeeping, with the lock held

    def _sign(self, oid: str, size) -> str:
        return hashlib.sha256(f"{self._secret}:{oid}:{size}".encode()).hexdigest()

    def _now(self) -> datetime:
        # Milliseconds, like the Hub's dates, and strictly increasing, so sorting by date
        # is deterministic even for repos seeded within the same millisecond.
        now = datetime.now(UTC)
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)
        if self._last_time is not None and now <= self._last_time:
            now = self._last_time + timedelta(milliseconds=1)
        self._last_time = now
        return now

    def _new_repo(self, private: bool, **metadata) -> dict:
        now, sha = self._now(), secrets.token_hex(20)
        return {
            "private": private,
            "files": {},
            "commits": [],
            "sha": sha,
            "revisions": {sha: {}},
            "gated": False,
            "library_name": None,
            "pipeline_tag": None,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "trending_score": 0,
            "created_at": now,
            "last_modified": now,
            **metadata,
        }

    def _commit(self, repo: dict, files: dict, deleted: list, summary, description="") -> str:
        for path in deleted:
            for name in [n for n in repo["files"] if n == path or n.startswith(path + "/")]:
                del repo["files"][name]
        repo["files"].update(files)
        repo["sha"] = secrets.token_hex(20)
        repo["revisions"][repo["sha"]] = dict(repo["files"])
        repo["last_modified"] = self._now()
        record = {"summary": summary, "description": description}
        repo["commits"].append(record | {"files": list(files), "deleted": deleted})
        return repo["sha"]

    def _repo(self, m, write=True) -> dict:
        key = (m["type"] or "model", m["repo"])
        if key not in self.repos:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        if write and key[1] in self.forbidden_repos:
            # What the Hub answers a push to a repo the token may read but not write.
            message = "Forbidden: pass `create_pr=1` as a query parameter to create a Pull Request"
            raise HubError(403, message)
        return self.repos[key]

    def _may_read(self, repo_id: str, user: str | None) -> bool:
        return user is not None and (
            user == repo_id.split("/")[0] or user in self.grants.get(repo_id, ())
        )

    def _read_repo(self, m, user: str | None) -> dict:
        repo = self._repo(m, write=False)
        if repo["private"] and not self._may_read(m["repo"], user):
            # The Hub hides a private repo's existence: the same answer as a missing one.
            raise HubError(404, "Repository not found", code="RepoNotFound")
        return repo

    def _revision(self, repo: dict, rev: str) -> tuple[str, dict[str, bytes]]:
        if rev == "main":
            return repo["sha"], repo["files"]
        if rev in repo["revisions"]:
            return rev, repo["revisions"][rev]
        raise HubError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")

    def _entry(self, repo_type, repo_id, repo, sha, files, *, siblings=False, blobs=False) -> dict:
        # The keys of the Hub's /api/models answers that ModelInfo (or DatasetInfo) reads.
        entry = {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "author": repo_id.split("/")[0],
            "sha": sha,
            "lastModified": _iso(repo["last_modified"]),
            "createdAt": _iso(repo["created_at"]),
            "private": repo["private"],
            "disabled": False,
            "gated": repo["gated"],
            "downloads": repo["downloads"],
            "likes": repo["likes"],
            "trendingScore": repo["trending_score"],
            "tags": list(repo["tags"]),
            "usedStorage": sum(
                self.declared_sizes.get((repo_id, path), len(content))
                for path, content in files.items()
            ),
        }
        if repo_type == "model":
            entry["modelId"] = repo_id
            # The Hub leaves these keys out rather than sending null.
            for key in ("library_name", "pipeline_tag"):
                if repo[key] is not None:
                    entry[key] = repo[key]
        if siblings:
            entry["siblings"] = [
                self._sibling(repo_id, path, files[path], blobs) for path in sorted(files)
            ]
        return entry

    def _sibling(self, repo_id: str, path: str, content: bytes, blobs: bool) -> dict:
        if not blobs:
            return {"rfilename": path}
        blob = self.blob(content, repo_id, path)
        sibling = {"rfilename": path, "size": blob.size, "blobId": blob.oid}
        if blob.sha256:
            sibling["lfs"] = {
                "sha256": blob.sha256,
                "size": blob.size,
                "pointerSize": blob.pointer_size,
            }
        return sibling

    def _path_info(self, repo_id: str, files: dict[str, bytes], path: str) -> dict | None:
        # A tree or paths-info entry; None for a path that is neither a file nor a folder.
        if (content := files.get(path)) is not None:
            blob = self.blob(content, repo_id, path)
            entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.sha256:
                lfs = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
                entry["lfs"] = lfs
            return entry
        prefix = f"{path}/"
        inside = sorted(name for name in files if name.startswith(prefix))
        if not path or not inside:
            return None
        # Not git's real tree hash, but like it: it changes exactly when the folder does.
        listing = "".join(f"{name}\0{self.blob(files[name]).oid}\n" for name in inside)
        oid = hashlib.sha1(listing.encode()).hexdigest()
        return {"type": "directory", "oid": oid, "size": 0, "path": path}


def _expanded(entry: dict, expand: list[str]) -> dict:
    # With `expand`, the Hub answers the ids and exactly the properties asked for.
    if not expand:
        return entry
    return {key: value for key, value in entry.items() if key in ("_id", "id") or key in expand}


# (method, path pattern, HubStandIn method, auth): "token" needs a known Hub token; "reader"
# takes none or a known one (the Hub refuses an unknown token even where none is needed);
# None ignores the Authorization header.
ROUTES = [
    ("GET", r"^/api/whoami-v2$", "whoami", "token"),
    ("POST", r"^/api/repos/create$", "create_repo", "token"),
    ("POST", r"^/api/validate-yaml$", "validate_yaml", None),
    ("GET", r"^/api/models$", "list_models", "reader"),
    ("GET", API_REPO + r"(?:/revision/(?P<rev>[^/]+))?$", "repo_info", "reader"),
    ("GET", API_REPO + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$", "tree", "reader"),
    ("POST", API_REPO + r"/paths-info/(?P<rev>[^/]+)$", "paths_info", "reader"),
    ("HEAD", RESOLVE, "resolve", "reader"),
    ("GET", RESOLVE, "resolve", "reader"),
    ("POST", API_REPO + r"/preupload/[^/]+$", "preupload", "token"),
    ("POST", API_REPO + r"/commit/[^/]+$", "commit", "token"),
    ("GET", API_REPO + r"/xet-write-token/[^/]+$", "xet_token", "token"),
    ("POST", GIT_REPO + r"batch$", "lfs_batch", "token"),
    ("POST", GIT_REPO + r"verify$", "lfs_verify", "token"),
    ("PUT", r"^/lfs-storage/(?P<oid>[0-9a-f]{64})$", "lfs_storage_put", None),
]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A client hanging up mid-answer (a killed download) is part of the tests, not a fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn
    protocol_version = "HTTP/1.1"  # keep-alive, like the Hub; every answer has a length

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_GET

    def log_message(self, format, *args) -> None:  # quiet test output
        pass

    def _read_body(self) -> bytes:
        # httpx streams file uploads (the LFS PUT) chunked when it cannot tell their length.
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _route(self, path: str) -> tuple[str, str | None, dict]:
        for method, pattern, name, auth in ROUTES:
            if method == self.command and (m := re.match(pattern, path)):
                # The client quotes revisions and file names (refs%2Fpr%2F1, a%20b.bin).
                params = {key: unquote(value) for key, value in m.groupdict().items() if value}
                return name, auth, {key: None for key in m.groupdict()} | params
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _dispatch(self) -> None:
        body = self._read_body()  # always drained, so error answers never cut an upload off
        url = urlsplit(self.path)
        hub, headers = self.hub, {}
        with hub._lock:
            hub.requests.append((self.command, url.path))
        try:
            name, auth, params = self._route(url.path)
            user = self._user()
            if auth and user is None and (auth == "token" or "Authorization" in self.headers):
                # Exactly this message tells `hf_raise_for_status` it is a bad token,
                # not a hidden repo; whoami() then raises "Invalid user token."
                raise HubError(401, "Invalid credentials in Authorization header")
            query = parse_qs(url.query)
            # Path parameters win; "_query" keeps repeated ones (filter=a&filter=b).
            params = {key: values[0] for key, values in query.items()} | params
            params["_query"] = query
            status, payload = getattr(hub, name)(user, params, body)
        except HubError as error:
            status, payload, headers = error.status, error.payload, error.headers
        except Exception as error:  # a malformed request: say what broke, like a 500
            status, payload = 500, {"error": f"stand-in failed: {error!r}"}
        if isinstance(payload, _File):
            self._send_file(payload)
        else:
            self._send(status, payload, headers)

    def _user(self) -> str | None:
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return self.hub.tokens.get(token) if scheme.lower() == "bearer" else None

    def _send(self, status: int, payload, headers: dict[str, str]) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        lfs = "lfs/objects" in self.path
        content_type = "application/vnd.git-lfs+json" if lfs else "application/json; charset=utf-8"
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        # The Hub echoes the client's trace id; the client appends it to error messages.
        self.send_header("X-Request-Id", self.headers.get("X-Amzn-Trace-Id", secrets.token_hex(8)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_file(self, file: _File) -> None:
        total, headers = len(file.content), dict(file.headers)
        start, end, status = 0, total, 200
        if (spec := self.headers.get("Range")) is not None:
            try:
                span = _byte_range(spec, total)
            except ValueError:
                error = {"error": "Requested Range Not Satisfiable"}
                self._send(416, error, {"Content-Range": f"bytes */{total}"})
                return
            if span is not None:
                (start, end), status = span, 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{total}"
        headers["Content-Length"] = str(end - start)
        headers["X-Request-Id"] = self.headers.get("X-Amzn-Trace-Id", secrets.token_hex(8))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self._stream(file, start, end)

    def _stream(self, file: _File, start: int, end: int) -> None:
        hub, view, position = self.hub, memoryview(file.content), start
        while position < end:
            if hub._stopped.is_set():
                self.close_connection = True  # a body cut short leaves the connection unusable
                return
            rate = hub.throttle_bytes_per_second
            # Throttled, pieces of a tenth of a second's worth keep the pace smooth.
            size = min(CHUNK, max(1024, int(rate / 10)) if rate else CHUNK, end - position)
            # Counted before the write, so a test that has read the bytes finds them counted;
            # taken back if the write fails.
            self._count(file.key, size)
            try:
                self.wfile.write(view[position : position + size])
            except ConnectionError:  # the client hung up (or was killed): nothing left to do
                self._count(file.key, -size)
                self.close_connection = True
                return
            position += size
            if rate and position < end:
                time.sleep(size / rate)

    def _count(self, key: tuple[str, str], size: int) -> None:
        with self.hub._lock:
            self.hub.bytes_served[key] = self.hub.bytes_served.get(key, 0) + size
