"""Reply versions on the chat page, on the real model: regenerate and edit keep what they
replace behind a "< 2 / 3 >" switcher; the version shown is remembered across a reload
and the conversation goes on from it; on a phone the switcher fits the screen."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.ui.test_chat_page import open_chat, replies, send, set_params, wait_reply
from tests.ui.test_phone_layout import PHONE, inside_screen, page_width


def regenerate(page: Page) -> None:
    replies(page).last.locator("[data-action=regenerate]").click()
    expect(page.locator("body")).to_have_attribute("data-generating", "true")
    wait_reply(page)


def shown_branch(page: Page) -> list[tuple[int, str]]:
    conversation = re.search(r"c=(\d+)", page.url).group(1)
    messages = page.request.get(f"/api/conversations/{conversation}").json()["messages"]
    return [(m["id"], m["content"]) for m in messages]


def test_regenerate_twice_switch_reload_and_send_from_the_shown_version(page: Page, screenshot):
    open_chat(page)
    set_params(page, temperature=1, max_tokens=4)
    send(page, "Say hi to the versions test.")
    wait_reply(page)
    ids = [replies(page).last.get_attribute("data-id")]
    for label in ("2 / 2", "3 / 3"):
        regenerate(page)
        expect(replies(page)).to_have_count(1)
        expect(replies(page).last.locator(".version-label")).to_have_text(label)
        ids.append(replies(page).last.get_attribute("data-id"))
    assert len(set(ids)) == 3

    reply = replies(page).last
    expect(reply.locator("[data-action=version-next]")).to_be_disabled()  # the newest
    reply.locator("[data-action=version-prev]").click()
    expect(replies(page).last).to_have_attribute("data-id", ids[1])
    expect(replies(page).last.locator(".version-label")).to_have_text("2 / 3")
    screenshot(page, "chat-versions")
    page.reload()  # the shown version is remembered
    expect(replies(page).last).to_have_attribute("data-id", ids[1])
    expect(replies(page).last.locator(".version-label")).to_have_text("2 / 3")

    send(page, "And once more.")
    wait_reply(page)
    branch = shown_branch(page)
    assert [str(i) for i, _ in branch[1:2]] == [ids[1]] and len(branch) == 4  # went on from v2
    expect(replies(page)).to_have_count(2)
    expect(replies(page).last.locator(".versions")).to_have_count(0)  # one version: no switcher


def test_an_edit_is_a_version_with_its_branch_and_the_title_follows(page: Page):
    open_chat(page)
    set_params(page, temperature=0, max_tokens=4)
    send(page, "Name a fruit for the edit test.")
    wait_reply(page)
    send(page, "And a vegetable?")
    wait_reply(page)
    before = shown_branch(page)

    first = page.locator(".message[data-role=user]").first
    first.locator("[data-action=edit]").click()
    first.locator(".edit-box").fill("Name a colour for the edit test.")
    first.locator("[data-action=save-edit]").click()
    wait_reply(page)
    users = page.locator(".message[data-role=user]")
    expect(users).to_have_count(1)  # the old branch is out of sight, not gone
    expect(users.first.locator(".content")).to_have_text("Name a colour for the edit test.")
    expect(users.first.locator(".version-label")).to_have_text("2 / 2")
    expect(page.locator("#chat-title")).to_have_text("Name a colour for the edit test.")
    expect(page.locator("#conversation-list li.active .title")).to_have_text(
        "Name a colour for the edit test."
    )

    users.first.locator("[data-action=version-prev]").click()
    expect(users).to_have_count(2)  # the first version with the branch that followed it
    expect(users.first.locator(".version-label")).to_have_text("1 / 2")
    assert shown_branch(page) == before
    # Deleting a version still asks, and says that its branch goes with it.
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    users.first.locator("[data-action=delete]").click()
    expect(users).to_have_count(2)
    assert asked and "version" in asked[0] and "cannot be undone" in asked[0]

    page.set_viewport_size(PHONE)  # the conversation opened on a phone
    page.reload()
    expect(users.first.locator(".version-label")).to_have_text("1 / 2")
    inside_screen(page, ".message[data-role=user] .versions >> nth=0")
    assert page_width(page)[0] <= PHONE["width"]
    users.first.locator("[data-action=version-next]").click()
    expect(users.first.locator(".version-label")).to_have_text("2 / 2")
