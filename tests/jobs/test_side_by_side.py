"""Side-by-side chat in Chromium: the default model and its 4-bit copy answer one prompt
in two columns, both streamed; the vote is saved and counted on the comparison page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import DEFAULT_MODEL
from tests.evaluations import QUANTIZED

PROMPT = "What is the capital of France?"


def test_two_columns_stream_and_the_vote_is_counted(
    staff_page: Page, jobs_lab, quantized_job, base_comparison
):
    page = staff_page
    deltas: dict[int, int] = {}
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda frame: deltas.update({id(ws): deltas.get(id(ws), 0) + 1})
        if '"type": "delta"' in frame or '"type":"delta"' in frame else None,
    ))  # fmt: skip
    page.goto("/side-by-side/")
    pickers = page.locator(".sbs-variant")
    expect(pickers).to_have_count(2)
    sockets = []  # the columns' own, from here on (the login's chat page has one too)
    page.on("websocket", lambda ws: sockets.append(ws))
    pickers.nth(0).select_option(DEFAULT_MODEL)
    pickers.nth(1).select_option(QUANTIZED)
    page.fill("#param-max_tokens", "8")  # the chat's sampling fields, shared
    page.fill("#sbs-prompt", PROMPT)
    page.click("#sbs-send")
    columns = page.locator(".sbs-column")
    expect(columns).to_have_count(2)
    for index in (0, 1):
        expect(columns.nth(index).locator(".sbs-vote")).to_be_visible(timeout=120_000)
        expect(columns.nth(index).locator(".sbs-reply")).not_to_be_empty()
        expect(columns.nth(index).locator(".sbs-stats")).to_contain_text("first token")
        expect(columns.nth(index).locator(".sbs-stats")).to_contain_text("tokens/s")
    assert len(deltas) == 2 and min(deltas.values()) >= 2, deltas  # both columns streamed
    columns.nth(1).locator(".sbs-vote").click()
    expect(page.locator("#sbs-vote-status")).to_have_text(f"Vote saved: {QUANTIZED} was better.")
    expect(columns.nth(1)).to_have_class(re.compile("sbs-winner"))
    page.wait_for_timeout(1500)  # past the chat socket's first reconnect delay
    assert len(sockets) == 2 and all(socket.is_closed() for socket in sockets)  # ended for good

    page.goto(f"/jobs/{base_comparison['id']}/compare/")
    pair = page.locator(f'#compare-votes tr[data-pair="{DEFAULT_MODEL} | {QUANTIZED}"]')
    expect(pair.locator(".votes")).to_have_text("1")
    expect(pair.locator(".first-wins")).to_have_text("0")
    expect(pair.locator(".second-wins")).to_have_text("1")


def newest_conversations(jobs_lab, count: int) -> list[int]:
    listed = jobs_lab.client().get("/api/conversations").json()["results"]
    return [conversation["id"] for conversation in listed[:count]]


@pytest.mark.parametrize(
    "body, detail",
    [
        ({"conversations": [1]}, 'expected {"conversations": [ids], "winner": i}'),
        ({"conversations": [1], "winner": 0}, "conversations must be 2 to 4 distinct"),
        ({"conversations": [1, 1], "winner": 0}, "conversations must be 2 to 4 distinct"),
        ({"conversations": [10**9, 10**9 + 1], "winner": 0}, f"no conversation {10**9} of yours"),
    ],
)
def test_bad_votes_are_400s(jobs_lab, body, detail):
    answer = jobs_lab.client().post("/api/side-by-side/votes", json=body)
    assert answer.status_code == 400 and detail in answer.json()["detail"], answer.text


def test_a_vote_names_one_of_its_columns(jobs_lab):
    conversations = newest_conversations(jobs_lab, 2)
    if len(conversations) < 2:
        pytest.skip("needs the side-by-side page test's conversations")
    for winner, detail in [(2, "winner must be between 0 and 1"), (True, "winner must be")]:
        body = {"conversations": conversations, "winner": winner}
        answer = jobs_lab.client().post("/api/side-by-side/votes", json=body)
        assert answer.status_code == 400 and detail in answer.json()["detail"], answer.text
