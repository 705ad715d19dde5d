"""Every page on a phone (390x844): nothing wider than the screen, the navigation behind a
menu button, tables as cards or scrolling in their own box, the chat's drawers inside the
screen; and at 1400x900 the desktop layout as it was."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import page_in
from tests.conftest import DEFAULT_MODEL
from tests.ui.lab_pages import api_post, evaluate_job

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}
NAV = ["Chat", "Side by side", "Models", "Settings", "Jobs", "Admin"]


@pytest.fixture(scope="module")
def job_id(lab_server) -> str:
    return evaluate_job(lab_server)


@pytest.fixture
def phone(browser, session_state, lab_server) -> Page:
    with page_in(browser, session_state, lab_server.url, PHONE) as page:
        yield page


def page_width(page: Page) -> tuple[int, int]:
    return page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )


def inside_screen(page: Page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    width = page.viewport_size["width"]
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (selector, box)


def menu_reaches_every_link(page: Page) -> None:
    expect(page.locator(".topnav a").first).to_be_hidden()  # folded away until asked
    page.click("#nav-toggle")
    expect(page.locator("#nav-toggle")).to_have_attribute("aria-expanded", "true")
    for name in NAV:
        link = page.locator("#site-nav .topnav a", has_text=name)
        expect(link).to_be_visible()
        inside_screen(page, f"#site-nav .topnav a:text-is('{name}')")
    expect(page.locator("#site-nav button", has_text="Log out")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#site-nav")).to_be_hidden()


def test_every_page_fits_a_phone_and_its_menu_reaches_every_link(phone: Page, job_id, screenshot):
    page = phone
    page.goto("/")
    title = "A conversation whose title is much longer than a phone is wide"
    conversation = api_post(page, "/api/conversations", {"title": title})["id"]
    paths = ["/", f"/?c={conversation}", "/side-by-side/", "/models/", "/usage/", "/settings/",
             "/jobs/"]  # fmt: skip
    paths += [f"/jobs/{job_id}/", f"/jobs/{job_id}/compare/"]
    for path in paths:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        scroll, client = page_width(page)
        assert scroll <= client, f"{path} is {scroll} px wide on a {client} px screen"
        menu_reaches_every_link(page)

    page.goto("/models/")
    name = page.locator(f"#models-table tr[data-name='{DEFAULT_MODEL}'] td.model-name")
    expect(name).to_contain_text(DEFAULT_MODEL)
    # One line for the name (a squeezed column broke it per character).
    lines = name.evaluate(
        "(cell) => { const range = document.createRange();"
        " range.selectNodeContents(cell.firstChild); return range.getClientRects().length; }"
    )
    assert lines == 1
    expect(name).to_have_attribute("data-label", "Name")  # the table is a list of cards
    screenshot(page, "models-phone")
    page.click("#nav-toggle")
    page.locator("#site-nav a", has_text="Chat").click()  # a link of the menu works
    expect(page).to_have_url(re.compile(r"/$"))

    for drawer, toggle in (
        ("#chat-settings", "#toggle-settings"),
        ("#chat-sidebar", "#toggle-sidebar"),
    ):
        page.click(toggle)
        expect(page.locator(drawer)).to_be_visible()
        inside_screen(page, drawer)
        assert page.locator(drawer).evaluate("(box) => box.scrollWidth <= box.clientWidth")
        page.keyboard.press("Escape")  # a floating panel closes with Esc
        expect(page.locator(drawer)).to_be_hidden()
    assert page_width(page)[0] <= PHONE["width"]
    screenshot(page, "chat-phone")


def test_the_desktop_keeps_its_top_bar_and_panels(page: Page):
    page.goto("/")
    expect(page.locator("#nav-toggle")).to_be_hidden()
    for name in NAV:
        expect(page.locator(".topnav a", has_text=name)).to_be_visible()
    expect(page.locator(".topbar-user .username")).to_be_visible()
    expect(page.locator("#chat-sidebar")).to_be_visible()
    expect(page.locator("#chat-settings")).to_be_visible()
    expect(page.locator("#chat-settings h2")).to_have_text("Sampling")  # not "Settings"
    label = page.locator("label[for='param-repetition_penalty']")
    expect(label).to_have_text("Repetition penalty")
    assert label.evaluate("(node) => node.scrollWidth <= node.clientWidth")  # not cut
    assert page_width(page) == [DESKTOP["width"], DESKTOP["width"]]
