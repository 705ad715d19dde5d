"""A local stand-in for the Hugging Face Hub, speaking the HTTP the real client sends.

It answers the calls `HfApi.whoami`, `.create_repo` and `.upload_folder` make in
huggingface_hub 2.4.0, with the Hub's response shapes and error headers, and records
what arrived. Only 127.0.0.1, on an ephemeral port; nothing goes to huggingface.co.

Xet: the client never asks the server whether to use Xet. `upload_folder` and
`_commit_api._upload_files` check `is_xet_available()` (hf_xet importable and not
`constants.HF_HUB_DISABLE_XET`) and, if so, send every file the preupload answer calls
"lfs" through hf_xet's own CAS protocol, which this stand-in does not speak: it answers
the `xet-write-token` call 501, and hf_xet fails at once with a ConnectionError naming that
URL. Files at or below `lfs_threshold` are "regular" and travel inside the commit, so they
work either way; for the LFS path, turn Xet off in the client with `use_plain_lfs`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub's: bigger files must go through LFS
REPO = r"(?P<repo>[^/]+/[^/]+)"
API_REPO = r"^/api/(?P<type>model|dataset|space)s/" + REPO
GIT_REPO = r"^/(?:(?P<type>dataset|space)s/)?" + REPO + r"\.git/info/lfs/objects/"
COMMIT_ERRORS = {  # the Hub's own words for the statuses tests ask the commit to fail with
    409: "A commit has happened since. Please refresh and try again.",
    500: "Internal Error - We're working hard to fix this as soon as possible!",
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
    in `.repos[(repo_type, repo_id)]` ({"private", "files": {path: bytes}, "commits"}) and
    `.requests` ([(method, path)])."""

    def __init__(self, tokens: dict[str, str] | None = None) -> None:
        self.tokens = dict(tokens or {"hf_standin_token": "tester"})  # token -> user name
        self.repos: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.forbidden_repos: set[str] = set()  # repo ids: create and push answer 403
        # HTTP status every commit answers while set. With hf_xet installed, upload_folder
        # retries 408/429/5xx commits 5 times with backoff (~23 s); others fail at once.
        self.fail_commit_with: int | None = None
        self.preupload_delay = 0.0  # seconds before answering a preupload: a slow upload
        self.lfs_threshold = LFS_THRESHOLD
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> bytes received by the storage PUT
        self._secret = secrets.token_hex(16)  # signs the storage hrefs, like S3 presigning
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle

    def start(self) -> HubStandIn:
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
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

    def _sign(self, oid: str, size) -> str:
        return hashlib.sha256(f"{self._secret}:{oid}:{size}".encode()).hexdigest()

    # -- endpoints: each gets (user, path and query parameters, body), returns (status, JSON)

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
        self.repos[(repo_type, repo_id)] = {
            "private": private,
            "files": {},
            "commits": [],
            "sha": secrets.token_hex(20),
        }
        return 200, {"url": url, "name": repo_id, "id": secrets.token_hex(12)}

    def validate_yaml(self, user, m, body):
        # upload_folder posts README.md here first (`_validate_yaml`); metadata is accepted.
        return 200, {"errors": [], "warnings": []}

    def repo_info(self, user, m, body):
        # create_repo(exist_ok=True) calls this after a 401/402/403 to see if the repo exists.
        repo = self._repo(m, write=False)
        return 200, {
            "_id": hashlib.md5(m["repo"].encode()).hexdigest()[:24],
            "id": m["repo"],
            "author": m["repo"].split("/")[0],
            "private": repo["private"],
            "sha": repo["sha"],
            "siblings": [{"rfilename": path} for path in sorted(repo["files"])],
        }

    def preupload(self, user, m, body):
        if self.preupload_delay:
            time.sleep(self.preupload_delay)
        # `_fetch_upload_modes` needs path, uploadMode ("lfs"/"regular") and shouldIgnore per
        # file, and reads "oid" (of the file already in the repo) to skip unchanged files.
        repo = self._repo(m)
        answers = []
        for file in json.loads(body)["files"]:
            mode = "lfs" if file["size"] > self.lfs_threshold else "regular"
            answer = {"path": file["path"], "uploadMode": mode, "shouldIgnore": False}
            if (old := repo["files"].get(file["path"])) is not None:
                big = len(old) > self.lfs_threshold
                answer["oid"] = hashlib.sha256(old).hexdigest() if big else git_blob_oid(old)
            answers.append(answer)
        return 200, {"files": answers, "commitOid": repo["sha"]}

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
        for path in deleted:
            for name in [n for n in repo["files"] if n == path or n.startswith(path + "/")]:
                del repo["files"][name]
        repo["files"].update(files)
        repo["sha"] = secrets.token_hex(20)
        record = {"summary": header.get("summary"), "description": header.get("description")}
        repo["commits"].append(record | {"files": list(files), "deleted": deleted})
        url = f"{self.repo_url(m['type'], m['repo'])}/commit/{repo['sha']}"
        # CommitInfo reads exactly these three keys (`_send_commit`).
        return 200, {"commitOid": repo["sha"], "commitUrl": url, "pullRequestUrl": None}

    def xet_token(self, user, m, body):
        raise HubError(
            501,
            "The Hub stand-in does not speak Xet: call use_plain_lfs(monkeypatch) "
            "(HF_HUB_DISABLE_XET) or keep files under lfs_threshold.",
        )

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

    def lfs_verify(self, user, m, body):
        obj = json.loads(body)
        stored = self.lfs_objects.get(obj["oid"])
        if stored is None or len(stored) != obj["size"]:
            raise HubError(404, "Object not found", header=False)
        return 200, {"success": True}

    def _repo(self, m, write=True) -> dict:
        key = (m["type"] or "model", m["repo"])
        if key not in self.repos:
            raise HubError(404, "Repository not found", code="RepoNotFound")
        if write and key[1] in self.forbidden_repos:
            # What the Hub answers a push to a repo the token may read but not write.
            message = "Forbidden: pass `create_pr=1` as a query parameter to create a Pull Request"
            raise HubError(403, message)
        return self.repos[key]


ROUTES = [  # (method, path pattern, HubStandIn method, needs a Hub token)
    ("GET", r"^/api/whoami-v2$", "whoami", True),
    ("POST", r"^/api/repos/create$", "create_repo", True),
    ("POST", r"^/api/validate-yaml$", "validate_yaml", False),
    ("GET", API_REPO + r"(?:/revision/[^/]+)?$", "repo_info", True),
    ("POST", API_REPO + r"/preupload/[^/]+$", "preupload", True),
    ("POST", API_REPO + r"/commit/[^/]+$", "commit", True),
    ("GET", API_REPO + r"/xet-write-token/[^/]+$", "xet_token", True),
    ("POST", GIT_REPO + r"batch$", "lfs_batch", True),
    ("POST", GIT_REPO + r"verify$", "lfs_verify", True),
    ("PUT", r"^/lfs-storage/(?P<oid>[0-9a-f]{64})$", "lfs_storage_put", False),
]


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn
    protocol_version = "HTTP/1.1"  # keep-alive, like the Hub; every answer has a length

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_GET

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

    def _route(self, path: str) -> tuple[str, bool, dict]:
        for method, pattern, name, needs_token in ROUTES:
            if method == self.command and (m := re.match(pattern, path)):
                return name, needs_token, m.groupdict()
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _dispatch(self) -> None:
        body = self._read_body()  # always drained, so error answers never cut an upload off
        url = urlsplit(self.path)
        hub, headers = self.hub, {}
        with hub._lock:
            hub.requests.append((self.command, url.path))
            try:
                name, needs_token, params = self._route(url.path)
                user = self._user()
                if needs_token and user is None:
                    # Exactly this message tells `hf_raise_for_status` it is a bad token,
                    # not a hidden repo; whoami() then raises "Invalid user token."
                    raise HubError(401, "Invalid credentials in Authorization header")
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                params = query | params  # path parameters win
                status, payload = getattr(hub, name)(user, params, body)
            except HubError as error:
                status, payload, headers = error.status, error.payload, error.headers
            except Exception as error:  # a malformed request: say what broke, like a 500
                status, payload = 500, {"error": f"stand-in failed: {error!r}"}
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
        self.wfile.write(data)
