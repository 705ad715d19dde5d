"""Limits at the HTTP server (mlxlab/http_limits.py), through raw sockets on loopback.

One server for the module, with short clocks (HEADERS, BODY): a body over its route's
limit is refused as it arrives (a declared one before any of it is read), a late body
is a 408, slow headers and idle connections are dropped, and no descriptor is left
behind. Before this, Daphne read and spooled every body whole before any check ran.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import socket
import time

import pytest

from tests.conftest import _manage, start_daphne
from tests.databases import database_env

HEADERS = 1.0  # MLXLAB_REQUEST_HEADER_SECONDS here
BODY = 2.0  # MLXLAB_REQUEST_BODY_SECONDS: a MiB must get through on a loaded machine
SLACK = 4.0  # a loaded 2-core machine's delay on top of a clock
MIB = 1024 * 1024
V1_LIMIT = 8 * MIB  # the default on /v1/
API_LIMIT = MIB  # the default on /api/
READ_SIZE = 65536  # what Twisted reads from a socket at once


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("http-limits")
    env = {
        **os.environ,
        **database_env(home),
        "MLXLAB_VAR_DIR": str(home),
        "MLXLAB_PRELOAD": "0",  # no model: nothing here reaches one
        "MLXLAB_JOB_WATCHDOG_IN_WEB": "0",
        "MLXLAB_REQUEST_HEADER_SECONDS": str(HEADERS),
        "MLXLAB_REQUEST_BODY_SECONDS": str(BODY),
    }
    _manage(env, "migrate", "--noinput", "-v", "0")
    live = start_daphne(home, env, "http-limits", wait_for_model=False)
    try:
        yield live
    finally:
        live.stop()


def connect(server, timeout: float = BODY + SLACK) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(timeout)
    return sock


def head(path: str, *lines: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *lines, "", ""]).encode()


def read_to_close(sock: socket.socket) -> bytes:
    """All the server sends until it closes; a timeout here fails the test."""
    data = b""
    while chunk := sock.recv(READ_SIZE):
        data += chunk
    return data


def read_response(sock: socket.socket) -> bytes:
    """One whole answer on a connection that stays open (its Content-Length's worth)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(READ_SIZE)
    length = int(parsed(data)[1]["content-length"])
    while len(data.partition(b"\r\n\r\n")[2]) < length:
        data += sock.recv(READ_SIZE)
    return data


def parsed(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    top, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body


def send_until_refused(sock: socket.socket, total: int) -> int:
    """Body bytes sent, up to `total`, before the server's close stops the sending."""
    sent, piece = 0, b"x" * READ_SIZE
    try:
        while sent < total:
            sock.sendall(piece)
            sent += len(piece)
    except OSError:  # EPIPE or ECONNRESET: the server closed the connection
        pass
    return sent


def test_a_declared_length_over_the_limit_is_answered_before_any_body(server):
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(head("/v1/chat/completions", f"Content-Length: {128 * MIB}"))
        status, headers, body = parsed(read_to_close(sock))  # no byte of body sent
        waited = time.monotonic() - started
    assert status == 413 and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large"
    assert f"{128 * MIB} bytes is larger than the {V1_LIMIT} bytes allowed" in error["message"]
    assert waited < BODY  # the 413 itself, not the body clock's 408


def test_each_route_keeps_its_shape_and_limit(server):
    with connect(server) as sock:  # a 100-continue client waits: the 413 comes instead
        sock.sendall(head("/v1/messages", "Expect: 100-continue", f"Content-Length: {9 * MIB}"))
        status, _, body = parsed(read_to_close(sock))
    assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large"
    with connect(server) as sock:  # the review's 32 MiB POST to /health
        sock.sendall(head("/health", f"Content-Length: {32 * MIB}"))
        assert parsed(read_to_close(sock))[0] == 413
    with connect(server) as sock:  # a root path header moves no body under another limit
        path = "/api/datasets/uploads/v1/chat/completions"
        root = "Daphne-Root-Path: /api/datasets/uploads"
        sock.sendall(head(path, root, f"Content-Length: {9 * MIB}"))
        status, _, body = parsed(read_to_close(sock))
    assert status == 413 and "on /v1/chat/completions" in json.loads(body)["error"]["message"]


def test_an_oversized_body_being_sent_is_cut_off(server):
    """The review's probe: 128 MiB declared on /v1/chat/completions, sent as fast as the
    socket takes it. What gets through before the close is at most the loopback socket
    buffers' worth (a few MiB), not the body; the 413 is there to read."""
    declared = 128 * MIB
    with connect(server) as sock:
        sock.sendall(head("/v1/chat/completions", f"Content-Length: {declared}"))
        sent = send_until_refused(sock, declared)
        try:
            status = parsed(sock.recv(READ_SIZE))[0]
        except ConnectionResetError:  # the reset came before the answer was read
            status = None
    assert sent < declared // 8, f"{sent} bytes went through"
    assert status in (413, None)


def spools(pid: int) -> list[int]:
    """Sizes of the deleted files the server holds open: Twisted spools a body to one."""
    sizes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith("(deleted)"):
                sizes.append(os.stat(f"/proc/{pid}/fd/{fd}").st_size)
        except OSError:  # closed meanwhile
            pass
    return sizes


def spooled(pid: int, size: int) -> bool:
    """Whether the server spools one body, of `size` bytes but for the last few KiB, which
    may still wait in the spool file's write buffer."""
    sizes = spools(pid)
    return len(sizes) == 1 and size - io.DEFAULT_BUFFER_SIZE < sizes[0] <= size


def eventually(check, seconds: float = SLACK) -> bool:
    """Whether `check()` holds within `seconds`: the server runs on its own time."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_a_chunked_body_is_cut_off_at_the_limit_with_nothing_spooled_past_it(server):
    pid = server.process.pid
    under = API_LIMIT - READ_SIZE
    with connect(server) as sock:
        sock.sendall(
            head("/api/keys", "Content-Type: application/json", "Transfer-Encoding: chunked")
        )
        for _ in range(under // READ_SIZE):
            sock.sendall(chunk(b"x" * READ_SIZE))
        held = eventually(lambda: spooled(pid, under))  # all of it so far, and only it
        sock.sendall(chunk(b"x" * (2 * READ_SIZE)))  # passes the limit
        status, _, body = parsed(read_to_close(sock))
    assert held, f"spooled: {spools(pid)}"
    assert status == 413
    received = int(re.search(r"body of (\d+) bytes", json.loads(body)["detail"])[1])
    assert API_LIMIT < received <= API_LIMIT + READ_SIZE  # one read past it, no more
    # Twisted closes the socket first, then the request and its spool.
    assert eventually(lambda: spools(pid) == []), f"left open: {spools(pid)}"


def test_a_late_body_is_a_408(server):
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(head("/v1/chat/completions", "Content-Length: 100") + b'{"model"')
        status, headers, body = parsed(read_to_close(sock))
        waited = time.monotonic() - started
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert BODY * 0.9 <= waited < BODY + SLACK


def test_an_upload_header_with_no_body_is_a_408(server):
    """The review's 64 MiB upload header (the uploads' limit) with nothing behind it."""
    with connect(server) as sock:
        sock.sendall(head("/api/datasets/uploads", f"Content-Length: {64 * MIB}"))
        status, _, body = parsed(read_to_close(sock))
    assert status == 408 and "did not arrive" in json.loads(body)["detail"]


def test_slow_headers_are_dropped(server):
    """Slowloris: a header line now and then, for ever. The server stops listening."""
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            while time.monotonic() - started < HEADERS + SLACK:
                sock.sendall(b"X-Slow: yes\r\n")
                time.sleep(0.2)
        except OSError:
            pass
        answered = read_to_close(sock)
        waited = time.monotonic() - started
    assert parsed(answered)[0] == 408
    assert waited < HEADERS + SLACK


def test_an_idle_connection_is_closed_and_a_prompt_one_served(server):
    with connect(server) as sock:
        for _ in range(2):  # keep-alive within the clock
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert parsed(read_response(sock))[0] == 200
            time.sleep(HEADERS / 4)
        started = time.monotonic()
        assert read_to_close(sock) == b""  # then idle: closed, nothing said
        assert time.monotonic() - started < HEADERS + SLACK
    with connect(server) as sock:  # a body in two parts, within the clock and the limit
        body = b'{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}'
        sock.sendall(head("/v1/chat/completions", f"Content-Length: {len(body)}") + body[:9])
        time.sleep(BODY / 4)
        sock.sendall(body[9:])
        status, _, answer = parsed(read_response(sock))
    assert status == 404 and json.loads(answer)["error"]["code"] == "model_not_found"


def test_an_open_websocket_outlives_the_header_clock(server):
    host = server.url.removeprefix("http://")
    key = base64.b64encode(os.urandom(16)).decode()
    with connect(server) as sock:
        sock.sendall(
            "\r\n".join([
                "GET /ws/chat/ HTTP/1.1", f"Host: {host}", f"Origin: {server.url}",
                f"Cookie: sessionid={server.staff_cookies['sessionid']}",
                "Upgrade: websocket", "Connection: Upgrade",
                f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", "", "",
            ]).encode()
        )  # fmt: skip
        assert sock.recv(READ_SIZE).startswith(b"HTTP/1.1 101 ")
        deadline = time.monotonic() + HEADERS * 2
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:  # frames the consumer sends are fine; the end of the stream is not
                assert sock.recv(READ_SIZE) != b"", "closed within the header clock"
            except TimeoutError:
                break


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_refused_connections_leave_no_descriptor_behind(server):
    pid = server.process.pid
    with connect(server) as sock:  # warm: whatever the first request opens stays open
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        read_to_close(sock)
    before = fd_count(pid)
    burst = [
        head("/v1/chat/completions", f"Content-Length: {128 * MIB}"),
        head("/v1/messages", "Transfer-Encoding: chunked") + chunk(b"x" * READ_SIZE),
        head("/v1/chat/completions", "Content-Length: 1000") + b"{",  # stalls
        b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # slow headers
    ] * 10
    sockets = [connect(server) for _ in burst]
    try:
        for sock, request in zip(sockets, burst, strict=True):
            sock.sendall(request)
        time.sleep(HEADERS / 3)
        held = fd_count(pid)  # the stalled and slow ones, each a socket (and a spool)
        for sock in sockets:  # the client keeps its end: the server must close its own
            read_to_close(sock)
        eventually(lambda: fd_count(pid) <= before)
        after = fd_count(pid)
    finally:
        for sock in sockets:
            sock.close()
    assert held >= before + 20
    assert after <= before, f"{after - before} descriptors left of {len(burst)} refused"
