"""A recording as a web page: one file that plays in chromium opened from disk with the network off,
the views drawing every lane's iterations to the end, pause and seek working, no console error; and
the command that writes it."""
from __future__ import annotations

import json
import string

from engine.workshop.recording import SHIPPED, load
from engine.workshop.recording.__main__ import main
from engine.workshop.recording.format import Writer
from engine.workshop.recording.web_page import web_page
from engine_helpers import whole_kv
from live_replay import ARTIFACTS, browser  # noqa: F401
from repo_paths import ROOT

PLAYER = "window.inflightPlayer"
DEMO = ROOT / "docs" / "demo.html"


def test_the_page_is_one_small_file_that_never_lets_recorded_text_end_its_script():
    page = web_page(load(SHIPPED))
    assert len(page.encode()) < 1 << 20  # the shipped recording's page is under 1 MiB
    embedded = page.split('id="ifl-recording">', 1)[1].split("</script>", 1)[0]
    assert "<" not in embedded and json.loads(embedded)["chunks"]
    packed = page.split('id="ifl-chunk-0">', 1)[1].split("</script>", 1)[0]
    assert set(packed) <= set(string.ascii_letters + string.digits + "+/=")  # base64: nothing ends the script
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page  # nothing to fetch


def test_the_command_writes_the_page_and_docs_demo_is_the_shipped_recordings(tmp_path):
    path = tmp_path / "demo.html"
    assert main(["html", str(SHIPPED), "-o", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == web_page(load(SHIPPED))
    assert DEMO.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
        "docs/demo.html is out of date: python -m engine.workshop.recording html "
        "assets/recordings/continuous_vs_static.jsonl.gz -o docs/demo.html")
    assert main(["html", str(tmp_path / "missing.jsonl.gz"), "-o", str(path)]) == 1  # says why, writes nothing


def test_the_shipped_demo_plays_offline_to_the_end_and_seeks(browser):  # noqa: F811
    path, rec = DEMO, load(SHIPPED)
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1300})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: errors.append(f"fetched {r.url}") if not r.url.startswith("file:") else None)
    page.goto(path.as_uri())
    page.wait_for_function(f"() => !!{PLAYER} && !!{PLAYER}.inst", timeout=60_000)
    assert errors == [], errors
    page.select_option(".ifl-speed", "4")
    assert page.evaluate(f"() => {PLAYER}.speed") == 4  # the page's own control
    page.evaluate(f"() => {{ {PLAYER}.speed = 16; }}")  # faster than it offers, to keep the test short
    page.wait_for_function("() => document.body.dataset.ended === 'true'", timeout=60_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-page-ended.png"))
    steps = page.evaluate(f"() => Object.fromEntries([...{PLAYER}.inst.state.by].map(([n, S]) => [n, S.steps.length]))")
    recorded = {lane: sum(1 for _, e in rec.events if e["type"] == "step" and e.get("lane") == lane) for lane in rec.lanes}
    assert steps == recorded  # every lane's iterations, each drawn once
    assert page.inner_text(".ifl-play") == "Play again"
    page.evaluate(f"() => {{ const s = document.querySelector('.ifl-seek'); s.value = String(({rec.end} - {rec.start}) / 2);"
                  " s.dispatchEvent(new Event('input')); }")
    half = page.evaluate(f"() => [...{PLAYER}.inst.state.by.values()].reduce((a, S) => a + S.steps.length, 0)")
    assert 0 < half < sum(recorded.values())  # seeking rebuilds the views up to the playhead
    assert errors == [], errors
    context.close()


def rechunked(path, parts: int):
    """The shipped recording written again as the recorder writes a long one: `parts` chunks, each opening
    with the lanes and each lane's KV tables whole."""
    rec = load(SHIPPED)
    pairs = rec.events
    whole, lanes, size = whole_kv([e for _, e in pairs]), pairs[0][1], len(pairs) // parts
    writer, keyed = Writer(path, rec.header), set()
    for i, ((t, e), full) in enumerate(zip(pairs, whole)):
        if i and i % size == 0 and writer.chunks < parts:
            writer.new_chunk()
            writer.event(t, lanes)
            keyed.clear()
        if e["type"] == "step" and e["lane"] not in keyed:
            keyed.add(e["lane"])
            e = full
        writer.event(t, e)
    writer.close()
    return load(path)


def test_a_long_recording_plays_chunk_by_chunk_and_seeks_into_a_chunk(browser, tmp_path):  # noqa: F811
    rec = rechunked(tmp_path / "chunked.jsonl.gz", 3)
    assert len(rec.chunks) == 3
    path = tmp_path / "chunked.html"
    path.write_text(web_page(rec), encoding="utf-8")
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1300})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_function(f"() => !!{PLAYER} && !!{PLAYER}.inst", timeout=60_000)
    page.evaluate(f"() => {{ {PLAYER}.speed = 16; }}")
    page.wait_for_function("() => document.body.dataset.ended === 'true'", timeout=60_000)
    steps = page.evaluate(f"() => Object.fromEntries([...{PLAYER}.inst.state.by].map(([n, S]) => [n, S.steps.length]))")
    recorded = {lane: sum(1 for _, e in rec.events if e["type"] == "step" and e.get("lane") == lane) for lane in rec.lanes}
    assert steps == recorded  # every lane's iterations across the chunks, each drawn once
    chunk = rec.chunks[1]
    pos = (chunk.t0 + chunk.t1) / 2
    page.evaluate(f"() => {{ const s = document.querySelector('.ifl-seek'); s.value = String({pos} - {rec.start});"
                  " s.dispatchEvent(new Event('input')); }")
    page.wait_for_function(f"() => {PLAYER}.chunk === 1 && !!{PLAYER}.events && {PLAYER}.next > 0")  # (unpacked, drawn)
    shown = page.evaluate(f"() => [...{PLAYER}.inst.state.by.values()].reduce((a, S) => a + S.steps.length, 0)")
    at = page.evaluate(f"() => {PLAYER}.pos")  # (the slider's step rounds it)
    in_chunk = [json.loads(x) for t, x in zip(rec.chunk(1).times, rec.chunk(1).texts) if t <= at]
    assert shown == sum(1 for e in in_chunk if e["type"] == "step") > 0  # the chunk from its start to the playhead
    assert errors == [], errors
    context.close()
