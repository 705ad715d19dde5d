"""Image URLs, fetched by the live server within its bounds (inference/media/remote.py).

The images come from a real HTTP server on 127.0.0.1, started once for the module. The
session's server may fetch from that one address (MLXLAB_MEDIA_ALLOW_PRIVATE=127.0.0.1,
tests/conftest.py) and from no other non-public one: 127.0.0.2 is loopback refused, as
are a 10.x address, the cloud metadata address and a redirect from 127.0.0.1 to 127.0.0.2.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import openai
import pytest

from tests.api.test_vision import ask, data_url, image_message
from tests.vision_models import png

PICTURE = png(112, 84, seed=21)
MIB = 1024 * 1024
FETCH_SECONDS = 2  # the session server's MLXLAB_MEDIA_FETCH_SECONDS


def _huge_png() -> bytes:
    """4097x4097, one pixel past the default 4096x4096: a small file, a big image."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("1", (4097, 4097)).save(out, format="PNG")
    return out.getvalue()


# path -> (status, headers, body); a callable body is the handler's own answer.
def _routes(port: int) -> dict:
    return {
        "/cat.png": (200, {"Content-Type": "image/png"}, PICTURE),
        "/untyped": (200, {}, PICTURE),
        "/hop": (302, {"Location": "/cat.png"}, b""),
        "/to-loopback": (302, {"Location": f"http://127.0.0.2:{port}/cat.png"}, b""),
        "/page.html": (200, {"Content-Type": "text/html"}, b"<html></html>"),
        "/lying.png": (200, {"Content-Type": "image/png"}, b"no picture here" * 10),
        "/huge.png": (200, {"Content-Type": "image/png"}, _huge_png()),
        "/missing.png": (404, {"Content-Type": "text/plain"}, b"not found"),
    }


class ImageHandler(BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self) -> None:
        if self.path == "/big-declared.png":  # a length over the bound: refused unread
            self._head(200, {"Content-Type": "image/png", "Content-Length": str(11 * MIB)})
            return
        if self.path == "/big-streamed.png":  # no length: cut off once past the bound
            self._head(200, {"Content-Type": "image/png"})
            self._stream(PICTURE + bytes(11 * MIB))
            return
        if self.path == "/slow.png":
            time.sleep(FETCH_SECONDS + 1)
        status, headers, body = self.routes.get(self.path, self.routes["/cat.png"])
        self._head(status, {**headers, "Content-Length": str(len(body))})
        self._stream(body)

    def _head(self, status: int, headers: dict) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _stream(self, body: bytes) -> None:
        # The fetch may stop reading: what a bound does.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def images() -> Iterator[str]:
    """The image server's base URL, on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ImageHandler)
    server.daemon_threads = True
    port = server.server_address[1]
    ImageHandler.routes = _routes(port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def claude(lab_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)


def url_block(url: str) -> dict:
    return {"type": "image", "source": {"type": "url", "url": url}}


def refusal(client, model: str, url: str) -> dict:
    """The OpenAI error body of a chat with the image at `url`."""
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, model, [image_message(url)])
    return caught.value.body


def test_an_image_url_gets_the_answer_its_data_url_gets(client, claude, vision_model, images):
    same = ask(client, vision_model, [image_message(data_url(PICTURE))])
    for path in ("/cat.png", "/hop", "/untyped"):  # a redirect, and no declared type
        fetched = ask(client, vision_model, [image_message(images + path)])
        assert fetched.choices[0].message.content == same.choices[0].message.content, path
        assert fetched.usage.prompt_tokens == same.usage.prompt_tokens, path
    message = claude.messages.create(
        model=vision_model, max_tokens=4, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                               url_block(images + "/cat.png")]}],
    )  # fmt: skip
    assert message.content[0].text == same.choices[0].message.content
    content = [{"type": "input_text", "text": "What is in this picture?"},
               {"type": "input_image", "image_url": images + "/cat.png"}]  # fmt: skip
    response = client.responses.create(
        model=vision_model, input=[{"role": "user", "content": content}],
        max_output_tokens=4, temperature=0, store=False,
    )  # fmt: skip
    assert response.output_text == same.choices[0].message.content


NON_PUBLIC = {
    "loopback": "http://127.0.0.2:{port}/cat.png",
    "private": "http://10.1.2.3/cat.png?token=hunter2",
    "metadata": "http://169.254.169.254/latest/meta-data/",
    "mapped-ipv6": "http://[::ffff:127.0.0.2]:{port}/cat.png",
    "redirect-to-loopback": "http://127.0.0.1:{port}/to-loopback",
}


@pytest.mark.parametrize("url", NON_PUBLIC.values(), ids=NON_PUBLIC.keys())
def test_a_non_public_address_is_refused_on_each_surface(client, claude, vision_model, images, url):
    url = url.format(port=images.rsplit(":", 1)[1])
    error = refusal(client, vision_model, url)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content[1].image_url"
    assert "non-public address, which this server does not fetch from" in error["message"]
    assert "hunter2" not in error["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model=vision_model,
            max_tokens=4,
            messages=[{"role": "user", "content": [url_block(url)]}],
        )
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("messages.0.content.0.source.url: the image URL")
    assert "non-public address" in body["error"]["message"]


BOUNDS = {
    "bytes-declared": ("/big-declared.png", f"larger than this server's limit of {10 * MIB} bytes"),
    "bytes-streamed": ("/big-streamed.png", f"larger than this server's limit of {10 * MIB} bytes"),
    "pixels": ("/huge.png", "4097x4097, more than this server's limit of 16777216 pixels"),
    "content-type": ("/page.html", "serves 'text/html', not an image of a supported type"),
    "sniffed": ("/lying.png", "the data is not an image of a supported type"),
    "status": ("/missing.png", "the image URL answered HTTP 404"),
    "timeout": ("/slow.png", f"not fetched within this server's {FETCH_SECONDS} seconds"),
}


@pytest.mark.parametrize("path, message", BOUNDS.values(), ids=BOUNDS.keys())
def test_an_image_past_a_bound_is_a_400_naming_it(client, vision_model, images, path, message):
    started = time.monotonic()
    error = refusal(client, vision_model, images + path)
    assert message in error["message"]
    assert error["param"] == "messages[0].content[1].image_url"
    assert time.monotonic() - started < FETCH_SECONDS + 5


def test_too_many_images_are_refused_before_any_is_fetched(client, vision_model, images):
    # Sixteen are the default bound; the seventeenth would time out if it were fetched.
    content = [{"type": "image_url", "image_url": {"url": data_url(PICTURE)}}] * 16
    content.append({"type": "image_url", "image_url": {"url": images + "/slow.png"}})
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, vision_model, [{"role": "user", "content": content}])
    assert time.monotonic() - started < FETCH_SECONDS
    assert caught.value.body["message"] == (
        "messages: a request may hold at most 16 images on this server; this one holds 17"
    )


def test_a_url_with_credentials_is_refused_without_echoing_them(client, vision_model, images):
    url = images.replace("http://", "http://reader:s3cret@") + "/cat.png"
    error = refusal(client, vision_model, url)
    assert "carries a user name or password, which is not sent" in error["message"]
    assert "s3cret" not in error["message"]
