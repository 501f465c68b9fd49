"""A newcomer's first run on the real default model, in a browser: the Straggler scenario's cards show the
model's answers in language (text prompts from assets/prompts.jsonl, cut at the lesson's lengths), and the
hover on a static request's wait says why, from the scheduler. The screenshot is the README's first one
(test-artifacts/readme-straggler.png, copied to docs/screenshots/)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, no_exception, require_browser, watch_errors
from engine.harness.app_process import CHROMIUM_ARGS, running_app
from service_helpers import free_port
from repo_paths import ROOT

pytestmark = pytest.mark.default_model
REPO = ROOT
ARTIFACTS = Path(os.environ.get("INFLIGHT_ARTIFACTS", REPO / "test-artifacts"))
INST = "document.querySelector('.ifl-root').inflight"
# a static request of the second batch, while it waits for the first: its wait bar and hover lines
SECOND_BATCH_WAIT = """() => { const inst = document.querySelector('.ifl-root').inflight;
    const col = inst.timeline.cols.find((c) => c.name === 'static');
    const band = col && col.bands.find((b) => b.view === 'gantt');
    const h = band && band.hits.find((x) => x.rid >= 8 && x.tip()[0].includes('queued')
                                           && x.tip().some((l) => l.includes('in flight')));
    if (!h) return null;
    const r = inst.timeline.canvas.getBoundingClientRect();
    return [r.left + (h.xa + h.xb) / 2, r.top + (h.ya + h.yb) / 2, h.tip()]; }"""

sync_playwright, expect = require_browser()


@pytest.fixture(scope="module")
def server():
    env = {k: v for k, v in os.environ.items() if k not in ("INFLIGHT_MODEL", "INFLIGHT_LANES")}
    env["INFLIGHT_DEVICE"] = "cpu"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open(ARTIFACTS / "streamlit-default-model.log", "w") as log, running_app(free_port(), env, log) as url:
        yield url


def test_straggler_reads_as_language_and_a_wait_says_why(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = watch_errors(browser.new_context(viewport={"width": 1600, "height": 2500}).new_page())  # views, text
        page.goto(server, wait_until="domcontentloaded")
        expect(page.locator(".ifl-pill[data-kind='ok']")).to_have_count(2, timeout=300_000)
        page.wait_for_function(f"() => {INST}.server.status && !{INST}.server.status.replay", timeout=300_000)
        page.get_by_role("button", name="Run scenario").click()
        page.locator(".ifl-timeline-canvas").scroll_into_view_if_needed()
        page.wait_for_function(f"() => ({SECOND_BATCH_WAIT})() !== null", timeout=120_000)
        page.wait_for_function(f"() => {INST}.state.by.get('continuous').reqs.size === 16 && "
                               f"[...{INST}.state.by.get('continuous').reqs.values()].every((R) => R.done)",
                               timeout=120_000)
        x, y, lines = page.evaluate(SECOND_BATCH_WAIT)
        assert any("a batch of 8 is in flight" in line for line in lines), lines
        page.mouse.move(x, y)
        expect(page.locator(".ifl-tip")).to_contain_text("a batch of 8 is in flight", timeout=5_000)
        readme_shot(page, ARTIFACTS / "readme-straggler.png")
        outs = page.locator(".ifl-sec-text .ifl-cell").first.locator(".ifl-out").all_inner_texts()
        assert len(outs) >= 8 and all(out.strip() for out in outs)
        assert not any("\ufffd" in out or "user\n" in out for out in outs), outs  # the model's answer, in words
        words = sum(len(out.split()) for out in outs)
        assert words > 100, outs
        prompts = page.locator(".ifl-sec-text .ifl-cell").first.locator(".ifl-prompt").all_inner_texts()
        assert all(p and not p.startswith("synthetic") for p in prompts), prompts
        no_exception(page)
        browser.close()


def readme_shot(page, path: Path) -> None:
    """The lanes' status and Gantt (with the hover), over the text cards: one picture."""
    from io import BytesIO

    from PIL import Image
    root = page.locator(".ifl-root").bounding_box()
    status = page.locator(".ifl-status-row").bounding_box()
    gantt = page.evaluate(f"""() => {{ const tl = {INST}.timeline, r = tl.canvas.getBoundingClientRect();
        const b = tl.geom.bands.find((x) => x.view === 'gantt'); return r.top + b.y + b.h + 40; }}""")
    parts = [page.screenshot(clip={"x": root["x"], "y": status["y"] - 8, "width": root["width"],
                                   "height": gantt - status["y"] + 8}),
             page.locator(".ifl-sec-text").screenshot()]  # scrolled into view
    images = [Image.open(BytesIO(p)) for p in parts]
    out = Image.new("RGB", (max(i.width for i in images), sum(i.height for i in images)), "#0b0f17")
    y = 0
    for image in images:
        out.paste(image, (0, y))
        y += image.height
    out.save(path)
