"""Downloads from the Hub that survive the process: a file grows in `<name>.part` and a
later attempt asks only for the bytes it lacks.

huggingface_hub resumes a broken connection within one process, but its partial file
is private to that process and deleted (or orphaned, when the process is killed), so a
killed pull would start a multi-GB file from byte zero. This asks the same `resolve`
URLs, with the same headers, for an HTTP range from where the part file ends, and checks
every file before it takes its final name: its size, then the sha256 the Hub lists for
an LFS file or the git blob hash for a small one.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from huggingface_hub import hf_hub_url
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

from .hub_repos import RepoFile

CHUNK = 1 << 20
RETRIES = 5  # broken connections in a row before a file gives up
PART = ".part"


class DownloadFailed(RuntimeError):
    """A file could not be fetched whole, or it came in with the wrong content."""


def part_bytes(folder: Path, files: list[RepoFile]) -> int:
    """Bytes of these files already in `folder`, finished or in part files."""
    total = 0
    for file in files:
        done, part = folder / file.path, folder / (file.path + PART)
        if done.is_file():
            total += done.stat().st_size
        elif part.is_file():
            total += min(part.stat().st_size, file.size)
    return total


def download(
    *,
    endpoint: str,
    repo_id: str,
    commit: str,
    files: list[RepoFile],
    folder: Path,
    token: str | None,
    on_bytes: Callable[[int], None],
) -> int:
    """Fetch `files` of the repo at `commit` into `folder`; returns the bytes received.

    `on_bytes(n)` is called as bytes arrive; it may raise to stop (a cancelled job), and
    whatever arrived stays in the part file for the next attempt.
    """
    received = 0
    for file in files:
        target = folder / file.path
        if target.is_file() and target.stat().st_size == file.size:
            continue  # verified when it took its name
        target.parent.mkdir(parents=True, exist_ok=True)
        url = hf_hub_url(repo_id, file.path, revision=commit, endpoint=endpoint)
        received += _fetch(url, file, target, token, on_bytes)
    return received


def _fetch(url: str, file: RepoFile, target: Path, token, on_bytes) -> int:
    part = target.with_name(target.name + PART)
    received, failures = 0, 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if have > file.size:  # not this file's bytes: start again
            part.unlink()
            have = 0
        if have == file.size:
            break
        try:
            received += _fetch_range(url, part, have, token, on_bytes)
            failures = 0
        except httpx2.TransportError as error:  # a broken connection: resume from the part
            failures += 1
            if failures > RETRIES:
                raise DownloadFailed(
                    f"{file.path}: the connection kept failing ({error})"
                ) from None
            time.sleep(min(2**failures, 8))
    _verify(part, file)
    part.replace(target)
    return received


def _fetch_range(url: str, part: Path, start: int, token, on_bytes) -> int:
    # identity: a gzip-encoded answer would count its bytes differently from the file's.
    headers = build_hf_headers(token=token, headers={"Accept-Encoding": "identity"})
    if start:
        headers["Range"] = f"bytes={start}-"
    received = 0
    with http_stream_backoff(method="GET", url=url, headers=headers) as response:
        if response.status_code == 416:
            return 0  # nothing left: the size check decides
        hf_raise_for_status(response)
        mode = "ab" if start and response.status_code == 206 else "wb"  # 200: the whole file
        with part.open(mode) as out:
            for chunk in response.iter_bytes(chunk_size=CHUNK):
                out.write(chunk)
                received += len(chunk)
                on_bytes(len(chunk))
    return received


def _verify(part: Path, file: RepoFile) -> None:
    size = part.stat().st_size
    if size != file.size:
        part.unlink()
        raise DownloadFailed(f"{file.path}: expected {file.size} bytes, got {size}")
    expected, actual = _expected_hash(file), _hash(part, file)
    if expected and actual != expected:
        part.unlink()  # the bytes are wrong: the next attempt fetches the file anew
        raise DownloadFailed(f"{file.path}: content does not match the Hub's hash")


def _expected_hash(file: RepoFile) -> str | None:
    return file.sha256 or file.blob_id


def _hash(part: Path, file: RepoFile) -> str:
    if file.sha256:
        digest = hashlib.sha256()
    else:  # a regular file's id is git's: sha1 over a "blob <size>\0" header and the bytes
        digest = hashlib.sha1()
        digest.update(b"blob %d\0" % file.size)
    with part.open("rb") as source:
        while block := source.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()
