"""python -m engine.harness.page_fps: how a recording plays in the offline page, or in the app's replay
(issue #42, item 4).

Writes the page `python -m engine.workshop.recording html` writes and opens it in headless chromium with
the network off, or (--app) starts the app (`streamlit run app.py`, its engines on a tiny random model) and
plays the recording there as a presenter would (uploaded in the sidebar's Replay); then reads the live
view's own counters once a second (frames drawn in the last second, mean frame time) until it ends: frames
a second and frame time over the seconds in which steps played (a recording's ends may hold none), and
whether the views took every lane's iterations to its last one. (Both players
follow the wall clock and catch up when frames run late, so the playback's length says nothing: the frames
do.)

  python -m engine.harness.page_fps docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz [--speed 1] \
      [--app --app-cpus 0] [--cpus 1] [--seconds 60]

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
from .app_process import CHROMIUM_ARGS, cpu_set, free_port, on_cpus
from .page_state import wait_on_page

PLAYER = "window.inflightPlayer"  # the offline page's player
INST = "document.querySelector('.ifl-root').inflight"  # the live view (the page's and the app's)
COUNTERS = ("(() => { const r = document.querySelector('.ifl-root');"
            " const steps = [...r.inflight.state.by.values()].reduce((n, S) => n + Math.max(S.lastIt, 0), 0);"
            " return {fps: +r.dataset.fps || 0, ms: +r.dataset.frameMs || 0, steps}; })()")
LAST_STEP = f"() => Object.fromEntries([...{INST}.state.by].map(([n, S]) => [n, S.lastIt]))"
PAGE_ENDED = "() => document.body.dataset.ended === 'true'"
APP_ENDED = f"() => {{ const r = {INST}.server.status.replay; return !r || r.ended; }}"
UPLOADED = "Play the uploaded recording"  # pages/ui/replay_panel.py


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.page_fps", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording", type=Path)
    ap.add_argument("--speed", type=float, default=1.0, help="the offline page's speed (the app's replay: 1x)")
    ap.add_argument("--app", action="store_true", help="in the app's replay instead of the offline page")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--cpus", default=None, help="the cores chromium runs on, by number (e.g. 1: the second)")
    ap.add_argument("--app-cpus", default=None, help="with --app: the cores the app runs on (e.g. 0)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--seconds", type=float, default=None,
                    help="play only this long (a long recording: its first minutes), not to the end")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.app and args.speed != 1.0:
        ap.error("--speed: the app's replay is measured at 1x")
    if args.app_cpus and not args.app:
        ap.error("--app-cpus needs --app")
    return args


def play(page, span_s: float, speed: float, ended: str, seconds: float | None = None) -> tuple[list[dict], float]:
    """Counters once a second until the player ends (or twice the span it should take, and 30 s more; or
    `seconds`, where given)."""
    t0 = time.monotonic()
    deadline = t0 + (2 * span_s / speed + 30 if seconds is None else seconds)
    samples, before = [], page.evaluate(COUNTERS)["steps"]
    while time.monotonic() < deadline:
        time.sleep(1.0)
        if page.evaluate(ended):
            break
        c = page.evaluate(COUNTERS)
        c["stepping"], before = c["steps"] > before, c["steps"]  # (a recording's ends may hold no steps)
        samples.append(c)
    return samples, time.monotonic() - t0


def in_app(browser, args, rec, tmp: Path) -> tuple[list[dict], float, dict]:
    """Play the recording in the app's replay, uploaded as a presenter would, once its engines are live."""
    from .app_process import running_app
    from .gpu_pace import app_env
    env = {**os.environ, **app_env(tmp, rows=16, num_blocks=1024)}  # (light engines: the replay is measured)
    with running_app(free_port(), env, cpus=cpu_set(args.app_cpus)) as url:
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(url, wait_until="domcontentloaded")
        # the engines live (the app first shows a recording while they load)
        wait_on_page(page, "() => { const s = document.querySelector('.ifl-root')?.inflight?.server.status;"
                     " return !!s && !s.replay; }", 300, "the app's engines live after its landing replay")
        page.locator("input[type=file]").set_input_files(str(args.recording))
        page.get_by_role("button", name=UPLOADED).click(timeout=60_000)
        page.wait_for_function(f"() => !!{INST}.server.status.replay", timeout=120_000)
        samples, wall = play(page, rec.end - rec.start, 1.0, APP_ENDED, args.seconds)
        return samples, wall, page.evaluate(LAST_STEP)


def measure(args) -> dict:
    from playwright.sync_api import sync_playwright
    rec = load(args.recording)
    recorded = None if args.seconds else {  # (played only in part: not the end's)
        lane: max((e["step"] for _, e in rec.each_event(("step",)) if e.get("lane") == lane), default=-1)
        for lane in rec.lanes}
    with tempfile.TemporaryDirectory() as tmp, on_cpus(args.cpus), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        try:
            if args.app:
                (samples, wall, drawn), load_s, page_mb = in_app(browser, args, rec, Path(tmp)), None, None
            else:
                path = Path(tmp) / "page.html"
                path.write_text(web_page(rec), encoding="utf-8")
                page_mb = path.stat().st_size / 2 ** 20
                context = browser.new_context(offline=True, viewport={"width": args.width, "height": args.height})
                page = context.new_page()
                t_load = time.monotonic()
                page.goto(path.as_uri())
                page.wait_for_function(f"() => !!{PLAYER} && !!{PLAYER}.inst", timeout=120_000)
                load_s = time.monotonic() - t_load
                page.evaluate(f"() => {{ {PLAYER}.speed = {args.speed}; }}")
                samples, wall = play(page, rec.end - rec.start, args.speed, PAGE_ENDED, args.seconds)
                drawn = page.evaluate(LAST_STEP)
        finally:
            browser.close()
    busy = [s for s in samples if s["stepping"]]  # the seconds in which steps played
    return {"recording": str(args.recording), "label": rec.label, "cpu": cpu_model(),
            "browser_cpus": args.cpus, "app_cpus": args.app_cpus, "events": len(rec), "where": "app" if args.app else "offline page",
            "span_s": rec.end - rec.start, "played_s": args.seconds, "page_mb": page_mb, "load_s": load_s, "speed": args.speed,
            "play_wall_s": wall, "fps_p50": statistics.median(s["fps"] for s in busy) if busy else None,
            "fps_min": min((s["fps"] for s in busy), default=None),
            "frame_ms_mean": statistics.fmean(s["ms"] for s in busy) if busy else None,
            "frame_ms_max": max((s["ms"] for s in busy), default=None),
            "last_step_recorded": recorded, "last_step_drawn": drawn, "samples": samples}


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def main(argv=None) -> int:
    args = parse_args(argv)
    res = measure(args)
    page = "" if res["page_mb"] is None else f"page {res['page_mb']:.1f} MiB, loaded in {res['load_s']:.1f} s; "
    print(f"{res['label']}: {res['events']} events over {res['span_s']:.1f} s, in the {res['where']}; {page}"
          f"at {res['speed']}x, while steps played: {res['fps_p50']} frames a second (p50; min {res['fps_min']}), "
          f"{_ms(res['frame_ms_mean'])} a frame (max {_ms(res['frame_ms_max'])}); each lane's last step drawn: "
          f"{res['last_step_drawn']}, recorded: {res['last_step_recorded']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0 if args.seconds or res["last_step_drawn"] == res["last_step_recorded"] else 1


if __name__ == "__main__":
    sys.exit(main())
