"""Static files on the live server: a path that climbs out of the static folders is a 404,
as a missing file is, never a 500 with a traceback per probe."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

import pytest

CLIMBS = [
    "/static/../../etc/passwd",
    "/static/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/static/lab/..%2f..%2f..%2f..%2fetc%2fpasswd",
]


def raw_get(url: str, path: str) -> tuple[int, bytes]:
    # A raw request: an HTTP client would resolve the dots before sending.
    address = urlparse(url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer


@pytest.mark.parametrize("path", CLIMBS)
def test_a_path_out_of_the_static_folders_is_a_404(lab_server, path):
    status, answer = raw_get(lab_server.url, path)
    assert status == 404 and b"root:" not in answer
    assert "SuspiciousFileOperation" not in lab_server.log()


def test_a_real_static_file_is_still_served(lab_server):
    status, answer = raw_get(lab_server.url, "/static/lab/util.js")
    assert status == 200 and b"export function formatBytes" in answer
