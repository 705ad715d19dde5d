"""The Content-Security-Policy (issue 56: there was none), and pages that pass it: no
inline script, no inline event handler, no inline style, nothing from another origin."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job

# What a script needs to run: a type the browser executes.
SCRIPT_TYPES = {"", "module", "text/javascript", "application/javascript"}


class InlineFinder(HTMLParser):
    """What in a page the policy would refuse: inline code and styles, other origins."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if name == "style":
                self.found.append(f"<{tag} style=...>")
            # What the page loads or posts to; a plain link to elsewhere is no load.
            loads = name == "src" or (tag, name) in (("link", "href"), ("form", "action"))
            if loads and value and _other_origin(value):
                self.found.append(f"<{tag} {name}={value}>")
            if name == "href" and value and value.lower().startswith("javascript:"):
                self.found.append(f"<{tag} href=javascript:...>")
        if tag == "style":
            self.found.append("<style>")
        if tag == "script" and (values.get("type") or "").lower() in SCRIPT_TYPES:
            self._in_script = "src" not in values

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.found.append(f"<script>{data.strip()[:40]}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False


def _other_origin(url: str) -> bool:
    parsed = urlparse(url)
    return bool(parsed.netloc) or parsed.scheme in ("http", "https", "ws", "wss")


def inline_parts(html: str) -> list[str]:
    finder = InlineFinder()
    finder.feed(html)
    return finder.found


def test_the_finder_finds_what_the_policy_refuses():
    page = (
        '<script>alert(1)</script><button onclick="x()">b</button><p style="color:red">'
        '<script src="https://cdn.example/x.js"></script><style>p{}</style>'
        '<script src="/static/ok.js"></script><script type="application/json">{}</script>'
    )
    assert inline_parts(page) == [
        "<script>alert(1)",
        "<button onclick=...>",
        "<p style=...>",
        "<script src=https://cdn.example/x.js>",
        "<style>",
    ]


def policy(response) -> dict[str, list[str]]:
    header = response.headers["Content-Security-Policy"]
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: values for name, *values in directives}


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("root", is_staff=True, is_superuser=True))
    return client


def pages(db) -> list[str]:
    job = Job.objects.create(kind="quantize", params={"model": "m"})
    evaluation = Job.objects.create(kind="evaluate", status="running", params={"variants": []})
    return [
        "/",
        "/side-by-side/",
        "/models/",
        "/settings/",
        "/jobs/",
        f"/jobs/{job.id}/",
        f"/jobs/{evaluation.id}/compare/",
        "/api/docs/",
        "/admin/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
        "/admin/access/apikey/add/",
    ]


def test_every_page_has_the_policy_and_passes_it(staff, db):
    for path in pages(db):
        response = staff.get(path)
        assert response.status_code == 200, path
        rules = policy(response)
        assert rules["default-src"] == ["'self'"], path
        assert rules["script-src"] == ["'self'"], path  # no 'unsafe-inline', no 'unsafe-eval'
        assert rules["style-src"] == ["'self'"], path
        assert rules["object-src"] == ["'none'"] and rules["frame-ancestors"] == ["'none'"]
        assert inline_parts(response.content.decode()) == [], path


def test_the_login_page_has_the_policy_and_passes_it(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert policy(response)["script-src"] == ["'self'"]
    assert inline_parts(response.content.decode()) == []
