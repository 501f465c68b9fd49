"""python -m engine.harness.page_fps: how a recording plays in the offline page (issue #42, item 4).

Writes the page `python -m engine.workshop.recording html` writes, opens it in headless chromium with the
network off, plays it at --speed and reads the live view's own counters once a second (frames drawn in
the last second, mean frame time) until it ends: frames a second, frame time, and whether the views took
every lane's iterations to its last one. (The player follows the wall clock and catches up when frames
run late, so the playback's length says nothing: the frames do.)

  python -m engine.harness.page_fps docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz [--speed 1]

Needs playwright and chromium (`apt-get install chromium`), as engine/harness/ui_cost.py does.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..telemetry.device_peaks import cpu_model
from ..workshop.recording.format import load
from ..workshop.recording.web_page import web_page
from .app_process import CHROMIUM_ARGS

PLAYER = "window.inflightPlayer"
COUNTERS = ("(() => { const r = document.querySelector('.ifl-root');"
            " return {fps: +r.dataset.fps || 0, ms: +r.dataset.frameMs || 0,"
            " ended: document.body.dataset.ended === 'true'}; })()")
LAST_STEP = f"() => Object.fromEntries([...{PLAYER}.inst.state.by].map(([n, S]) => [n, S.lastIt]))"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.page_fps", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording", type=Path)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--cpus", default=None, help="the cores chromium runs on, by number (e.g. 1: the second)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def play(page, speed: float, span_s: float) -> tuple[list[dict], float]:
    """Counters once a second from play to the end (or twice the span it should take, and 30 s more)."""
    page.evaluate(f"() => {{ {PLAYER}.speed = {speed}; }}")
    t0 = time.monotonic()
    deadline = t0 + 2 * span_s / speed + 30
    samples = []
    while time.monotonic() < deadline:
        time.sleep(1.0)
        c = page.evaluate(COUNTERS)
        if c["ended"]:
            break
        samples.append(c)
    return samples, time.monotonic() - t0


def measure(args) -> dict:
    from playwright.sync_api import sync_playwright
    rec = load(args.recording)
    recorded = {lane: max((e["step"] for _, e in rec.events if e["type"] == "step" and e.get("lane") == lane),
                          default=-1) for lane in rec.lanes}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        path = Path(tmp) / "page.html"
        path.write_text(web_page(rec), encoding="utf-8")
        page_mb = path.stat().st_size / 2 ** 20
        browser = launch(p, args)
        try:
            context = browser.new_context(offline=True, viewport={"width": args.width, "height": args.height})
            page = context.new_page()
            t_load = time.monotonic()
            page.goto(path.as_uri())
            page.wait_for_function(f"() => !!{PLAYER} && !!{PLAYER}.inst", timeout=120_000)
            load_s = time.monotonic() - t_load
            samples, wall = play(page, args.speed, rec.end - rec.start)
            drawn = page.evaluate(LAST_STEP)
        finally:
            browser.close()
    busy = [s for s in samples if s["fps"] > 0]
    return {"recording": str(args.recording), "label": rec.label, "cpu": cpu_model(),
            "browser_cpus": args.cpus, "events": len(rec),
            "span_s": rec.end - rec.start, "page_mb": page_mb, "load_s": load_s, "speed": args.speed,
            "play_wall_s": wall, "fps_p50": statistics.median(s["fps"] for s in busy) if busy else None,
            "fps_min": min((s["fps"] for s in busy), default=None),
            "frame_ms_mean": statistics.fmean(s["ms"] for s in busy) if busy else None,
            "frame_ms_max": max((s["ms"] for s in busy), default=None),
            "last_step_recorded": recorded, "last_step_drawn": drawn, "samples": samples}


def launch(p, args):
    """Chromium, on --cpus where given (its processes inherit this one's cores while it starts)."""
    if not args.cpus:
        return p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    try:
        return p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
    finally:
        os.sched_setaffinity(0, mine)


def main(argv=None) -> int:
    args = parse_args(argv)
    res = measure(args)
    print(f"{res['label']}: {res['events']} events over {res['span_s']:.1f} s; page {res['page_mb']:.1f} MiB, "
          f"loaded in {res['load_s']:.1f} s; at {res['speed']}x: {res['fps_p50']} frames a second (p50; min "
          f"{res['fps_min']}), {res['frame_ms_mean']:.1f} ms a frame (max {res['frame_ms_max']:.1f}); each lane's "
          f"last step drawn: {res['last_step_drawn']}, recorded: {res['last_step_recorded']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0 if res["last_step_drawn"] == res["last_step_recorded"] else 1


if __name__ == "__main__":
    sys.exit(main())
