"""Room mode in a real browser: the presenter link unlocks the controls for that browser only, and a
phone joins through /join.

`streamlit run app.py` with INFLIGHT_ROOM=1 on a tiny model; one chromium context follows the
presenter link, another opens the app as someone in the room would, a third is a phone-sized /join."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from engine.harness.app_process import CHROMIUM_ARGS, running_app
from engine.workshop.recording import SHIPPED
from browser_helpers import CHROMIUM, no_exception, require_browser, watch_errors
from service_helpers import free_port, serve
from proxy_helpers import PROXY_ADDRESS, reverse_proxy
from repo_paths import ROOT

REPO = ROOT
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))
TOKEN = "room-presenter-token-42"
NAME = "Ada <i>L</i>"  # shown as text everywhere: the name must not become markup
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}

sync_playwright, expect = require_browser()


@pytest.fixture(scope="module")
def server(tiny_model_dirs):
    env = {**os.environ, "INFLIGHT_MODEL": str(tiny_model_dirs["llama"]), "INFLIGHT_DEVICE": "cpu",
           "INFLIGHT_ROOM": "1", "INFLIGHT_TOKEN": TOKEN, "INFLIGHT_TRUSTED_PROXIES": PROXY_ADDRESS,
           "INFLIGHT_SUBMIT_BURST": "2", "INFLIGHT_SUBMITS_PER_MINUTE": "1"}  # a phone's third prompt is refused
    with running_app(free_port(), env, timeout=90) as url:
        yield url


def test_presenter_link_unlocks_controls_viewers_see_why_not(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        presenter = watch_errors(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())
        presenter.goto(f"{server}/presenter?token={TOKEN}", wait_until="domcontentloaded")
        assert "token" not in presenter.url  # the token leaves the address bar
        expect(presenter.get_by_role("button", name="Pause", exact=True)).to_be_visible(timeout=60_000)

        viewer = watch_errors(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())
        viewer.goto(server, wait_until="domcontentloaded")
        expect(viewer.get_by_text("You are watching as a viewer")).to_be_visible(timeout=60_000)
        assert viewer.get_by_role("button", name="Pause", exact=True).count() == 0
        wrong = viewer.goto(f"{server}/presenter?token=guess")
        assert wrong.status == 403
        # Streamlit's uploads are the presenter's: a recording from the sidebar plays, a viewer's PUT is refused
        presenter.locator("input[type=file]").set_input_files(str(SHIPPED))
        presenter.get_by_role("button", name="Play the uploaded recording").click(timeout=60_000)
        expect(presenter.get_by_text("Recording of a real run").first).to_be_visible(timeout=60_000)
        refused = viewer.request.put(f"{server}/_stcore/upload_file/any-session/any-file",
                                     multipart={"file": {"name": "x.gz", "mimeType": "application/gzip",
                                                         "buffer": b"x" * 1000}})
        assert refused.status == 401
        presenter.get_by_role("button", name="Go live").click()  # (the module's next tests watch the engines)
        expect(presenter.get_by_text("Recording of a real run")).to_have_count(0, timeout=60_000)
        for page in (presenter, viewer):
            no_exception(page)
        browser.close()


def send(phone, prompt: str) -> None:
    phone.fill("#prompt", prompt)
    phone.click("#send")


def test_a_phone_joins_its_answer_streams_and_the_projector_labels_it(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        projector = watch_errors(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())
        projector.goto(f"{server}/presenter?token={TOKEN}", wait_until="domcontentloaded")
        expect(projector.get_by_text("Let the room join")).to_be_visible(timeout=60_000)
        expect(projector.get_by_text("0 people")).to_be_visible()

        phone = watch_errors(browser.new_context(**PHONE).new_page())
        phone.goto(f"{server}/join", wait_until="domcontentloaded")
        # count the pieces of text as they arrive: a streamed answer comes in many
        phone.evaluate("""() => { window.pieces = 0; new MutationObserver((m) => { window.pieces += m.length; })
                                   .observe(document.getElementById("out"), { childList: true }); }""")
        phone.fill("#name", NAME)
        send(phone, "Tell the room a story")
        expect(phone.locator("#notice")).to_contain_text("On the big screen as #", timeout=30_000)
        expect(phone.locator("#meta")).to_contain_text("Done", timeout=60_000)
        assert phone.locator("#out").inner_text().strip() and phone.evaluate("window.pieces") > 1
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390  # fits the phone's width

        names = projector.locator(".ifl-tag.ifl-named", has_text=NAME)  # the text card shows the name, one per lane
        expect(names.first).to_be_visible(timeout=30_000)
        assert projector.locator(".ifl-tag i").count() == 0
        # and the Gantt labels its row "#id name" (on the canvas; its label lists the rows as text)
        gantt = projector.locator(".ifl-timeline-canvas").first
        gantt.scroll_into_view_if_needed()  # views scrolled out of sight are not drawn
        expect(gantt).to_have_attribute("aria-label", re.compile(r"#\d+ " + re.escape(NAME)))
        expect(projector.get_by_text("1 person")).to_be_visible(timeout=10_000)

        send(phone, "Another one")  # the second of a burst of 2
        expect(phone.locator("#meta")).to_contain_text("Done", timeout=60_000)
        send(phone, "And a third")  # over the room's rate: refused, kindly
        expect(phone.locator("#notice")).to_contain_text("The room is busy", timeout=30_000)
        expect(phone.locator("#notice")).to_contain_text("try again in")
        expect(phone.locator("#send")).to_be_enabled()
        for page in (projector, phone):
            no_exception(page)
        browser.close()


def test_phones_behind_a_tunnel_each_have_their_own_limits(server):
    """Two phones reach the room through one reverse proxy (the server sees one address): each sends
    its burst of two, and only a phone's own third prompt is refused."""
    with serve(reverse_proxy(server.split("://", 1)[1])) as tunnel, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        phones = [watch_errors(browser.new_context(**PHONE).new_page()) for _ in range(2)]
        for i, phone in enumerate(phones):
            phone.goto(f"http://{tunnel}/join", wait_until="domcontentloaded")
            phone.fill("#name", f"Phone {i}")
        for phone in phones:
            for prompt in ("Say hi", "Say bye"):
                send(phone, prompt)
                expect(phone.locator("#meta")).to_contain_text("Done", timeout=60_000)
        send(phones[0], "One more")
        expect(phones[0].locator("#notice")).to_contain_text("The room is busy", timeout=30_000)
        phones[0].screenshot(path=str(ARTIFACTS / "room-phone-behind-tunnel.png"))
        for phone in phones:
            no_exception(phone)
        browser.close()
