"""The side-by-side page on the real models: variants added and removed, the chat's
sampling fields sent to every variant, Stop for all, a tie vote, the run grouped in the
chat's sidebar under titles that tell its conversations apart; and, over a stand-in
socket, replies rendered as the chat renders Markdown (sanitised), on a phone too."""

from __future__ import annotations

import json

from playwright.sync_api import Page, WebSocketRoute, expect

from tests.conftest import DEFAULT_MODEL, THINKING_MODEL
from tests.ui.test_phone_layout import PHONE, inside_screen, page_width

PROMPT = "Write a very long story about a dragon, for the side-by-side test."
MARKDOWN = (
    "Here it is:\n\n```python\nprint('hi')\n```\n\n"
    '<img src="/x.png" onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'
)


def sent_requests(page: Page) -> list[dict]:
    """Every `send` the page's sockets send from now on."""
    sent: list[dict] = []

    def watch(socket) -> None:
        def frame(payload) -> None:
            data = json.loads(payload) if isinstance(payload, str) else {}
            if data.get("type") == "send":
                sent.append(data)

        socket.on("framesent", frame)

    page.on("websocket", watch)
    return sent


def test_variants_shared_sampling_stop_for_all_a_tie_and_the_sidebar(page: Page, screenshot):
    page.goto("/side-by-side/")
    rows = page.locator(".sbs-variant-row")
    expect(rows).to_have_count(2)
    expect(rows.locator(".sbs-remove").first).to_be_disabled()  # two at least
    page.click("#sbs-add")
    expect(rows).to_have_count(3)
    rows.nth(1).locator(".sbs-remove").click()
    expect(rows).to_have_count(2)
    expect(rows.nth(1).locator(".sbs-variant")).to_have_attribute("aria-label", "Variant 2")
    rows.nth(0).locator(".sbs-variant").select_option(DEFAULT_MODEL)
    rows.nth(1).locator(".sbs-variant").select_option(THINKING_MODEL)

    expect(page.locator("#param-max_tokens")).to_have_value("2048")  # as the chat starts
    page.fill("#param-temperature", "0")
    # Long enough that the default model is still writing when the thinking model's worker
    # has loaded and answered too (400 tokens ended first once on a busy two-core CI).
    page.fill("#param-max_tokens", "2000")
    page.fill("#param-stop", "THE END")
    page.fill("#system-prompt", "You tell stories.")
    sent = sent_requests(page)
    page.fill("#sbs-prompt", PROMPT)
    page.click("#sbs-send")
    columns = page.locator(".sbs-column")
    expect(columns).to_have_count(2)
    expect(page.locator("#sbs-stop")).to_be_visible()
    for index in (0, 1):  # the thinking model loads first
        stats = columns.nth(index).locator(".sbs-stats")
        expect(stats).to_contain_text("first token", timeout=120_000)
    page.click("#sbs-stop")
    for index in (0, 1):
        expect(columns.nth(index).locator(".sbs-stats")).to_contain_text("stopped", timeout=30_000)
    expect(page.locator("#sbs-stop")).to_be_hidden()
    assert len(sent) == 2 and sent[0]["side_by_side_run"] == sent[1]["side_by_side_run"]
    for request in sent:  # every variant samples alike
        assert request["params"] == {"temperature": 0, "max_tokens": 2000, "stop": ["THE END"]}
        assert request["system_prompt"] == "You tell stories."
    # The chat's Markdown path: the default model's text arrives as paragraphs, not raw.
    expect(columns.nth(0).locator(".sbs-reply.markdown p").first).to_be_visible()

    expect(columns.nth(0).locator(".sbs-vote")).to_be_visible()
    page.click("#sbs-tie")
    expect(page.locator("#sbs-vote-status")).to_have_text("Vote saved: a tie.")
    expect(columns.nth(0).locator(".sbs-vote")).to_be_hidden()
    screenshot(page, "side-by-side")

    page.goto("/")  # the run in the chat's sidebar: apart from the chats, one group
    page.wait_for_load_state("networkidle")
    expect(page.locator("#conversation-list li", has_text="side-by-side test")).to_have_count(0)
    page.select_option("#conversation-filter", "side_by_side")
    group = page.locator("#conversation-list li.conversation-group").first
    expect(group).to_contain_text("Write a very long story about a dragon")
    screenshot(page, "chat-side-by-side-runs")
    titles = page.locator("#conversation-list li.grouped .title")
    expect(titles).to_have_count(2)
    assert sorted(titles.all_text_contents()) == sorted([DEFAULT_MODEL, THINKING_MODEL])
    for index in (0, 1):  # told apart, and not cut
        assert titles.nth(index).evaluate("(node) => node.scrollWidth <= node.clientWidth")


def fake_chat_server(socket: WebSocketRoute) -> None:
    """Answers each `send` with one reply in Markdown, raw HTML in it."""

    def reply(message) -> None:
        data = json.loads(message)
        if data.get("type") != "send":
            return
        summary = {"id": 10**9, "title": "x", "model": data["model"], "updated_at": "",
                   "side_by_side_run": data["side_by_side_run"]}  # fmt: skip
        saved = {"id": 10**9, "role": "assistant", "content": MARKDOWN, "reasoning": "",
                 "stats": {"finish_reason": "stop", "ttft_ms": 5}}  # fmt: skip
        for answer in (
            {"type": "conversation", "conversation": summary},
            {"type": "start", "model": data["model"]},
            {"type": "delta", "text": MARKDOWN, "stats": {"ttft_ms": 5}},
            {"type": "done", "message": saved},
        ):
            socket.send(json.dumps(answer))

    socket.on_message(reply)


def test_replies_render_sanitised_markdown_and_fit_a_phone(page: Page, screenshot):
    page.set_viewport_size(PHONE)
    page.route_web_socket("**/ws/chat/", fake_chat_server)
    page.goto("/side-by-side/")
    expect(page.locator("#sbs-sampling")).not_to_have_attribute("open", "")  # folded away
    page.fill("#sbs-prompt", "Show me some code.")
    page.click("#sbs-send")
    replies = page.locator(".sbs-column .sbs-reply")
    expect(replies).to_have_count(2)
    for index in (0, 1):
        reply = replies.nth(index)
        expect(reply.locator(".code-block pre code")).to_have_text("print('hi')")
        expect(reply.locator(".code-lang")).to_have_text("python")
        expect(reply.locator("img, script")).to_have_count(0)
        expect(reply.locator("a.image-link")).to_have_count(1)  # an image is a link, not fetched
    assert page.evaluate("window.__pwned") is None
    screenshot(page, "side-by-side-phone")
    inside_screen(page, ".sbs-column >> nth=0")
    assert page_width(page)[0] <= PHONE["width"]
