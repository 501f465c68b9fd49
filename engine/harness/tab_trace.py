"""python -m engine.harness.tab_trace: where a tab's main thread goes while the views draw at a GPU's pace
(issue #42, item 3).

Starts the app at a GPU's pace (engine/harness/gpu_pace.py: two lanes of --rows rows, each lane's steps capped
at --rate a second), opens one chromium tab on the playground as ui_cost does, sends --requests requests and
records a Chrome trace for --seconds while they run. It then sums the renderer main thread's slices by name,
in ms per second of the trace: requestAnimationFrame callbacks (the views' draw), the compositor commit and
layer updates, the socket's messages, style, layout and paint. Slices nest (a FunctionCall sits inside a
RunTask), so read the names as a tree, not as parts of one sum; `busy` is the top-level tasks' share.

  python -m engine.harness.tab_trace [--seconds 8] [--rows 256] [--rate 150] [--requests 2048] \
      [--app-cpus 0 --browser-cpus 1] [--top 30] [--no-draw Slots,UtilView] [--watch kv] [--json out.json] \
      [--screenshot tab.png]

--watch says which views are in sight while traced (a view out of sight is not drawn): the timeline (Gantt,
batch slots, utilization: where ui_cost looks), or the KV maps.

Needs playwright and chromium, as engine/harness/ui_cost.py does.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from .app_process import CHROMIUM_ARGS, cpu_set, free_port, on_cpus, running_app
from .engine_client import EngineClient
from .gpu_pace import app_env, check_full_batches
from .ui_cost import open_tabs

MAIN = "CrRendererMain"  # the renderer's main thread, as chromium names it in a trace
TOP_LEVEL = "ThreadControllerImpl::RunTask"  # each task the main thread runs, outermost
FRAME = "FireAnimationFrame"  # one requestAnimationFrame turn
CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "blink", "cc", "v8", "toplevel"]


# Which of the views were in the tab's viewport (a view out of sight is not drawn).
IN_SIGHT = ("(() => { const on = (sel) => [...document.querySelectorAll(sel)].some((e) => {"
            " const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; });"
            " return {timeline: on('.ifl-timeline-canvas'), kv: on('.ifl-cell-kv'), text: on('.ifl-cell-text')}; })()")


def main_thread_ms(trace, seconds: float) -> tuple[list[tuple[str, float]], float]:
    """The main thread's complete slices ("X") summed by name, in ms per second of `seconds` (largest first),
    and its busy share (its top-level tasks' time over the span). `trace`: a Chrome trace (a dict with
    traceEvents, or their list)."""
    totals: dict[str, float] = defaultdict(float)
    for e in main_slices(trace):
        totals[e["name"]] += e.get("dur", 0) / 1e3
    per_s = sorted(((name, ms / seconds) for name, ms in totals.items()), key=lambda x: -x[1])
    return per_s, totals.get(TOP_LEVEL, 0.0) / 1e3 / seconds


def frames_per_s(trace, seconds: float) -> float:
    """Animation frames the main thread ran a second (the views draw in one: assets/live/frame.js)."""
    return sum(1 for e in main_slices(trace) if e["name"] == FRAME) / seconds


def main_slices(trace) -> list[dict]:
    """The renderer main thread's complete slices ("X")."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    mains = {(e["pid"], e["tid"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("args", {}).get("name") == MAIN}
    return [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in mains]


def no_draw_js(modules: str) -> str:
    """JS that stops the live view's modules named (comma-separated: Timeline, Slots, Gantt, UtilView,
    TextView, ...; assets/live) from drawing: what a tab costs without them, by difference."""
    names = [m.strip() for m in modules.split(",") if m.strip()]
    if not all(m.isidentifier() for m in names):
        raise ValueError(f"--no-draw: module names, comma-separated: {modules!r}")
    return "".join(f"{m}.draw = () => {{}};" for m in names)


def trace_tab(args) -> dict:
    """The trace of one tab while the lanes run the load at a GPU's pace; what main_thread_ms makes of it."""
    from playwright.sync_api import sync_playwright
    from websockets.sync.client import connect
    work = Path(tempfile.mkdtemp(prefix="tab-trace-"))
    env = {**os.environ, **app_env(work, args.rows)}
    port = args.port or free_port()
    ws_url = f"ws://127.0.0.1:{port}/engine/ws"
    with running_app(port, env, cpus=cpu_set(args.app_cpus)) as url, on_cpus(args.browser_cpus), \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page = open_tabs(browser, url, 1)[0]
        if args.watch == "kv":
            page.locator(".ifl-cell-kv").first.scroll_into_view_if_needed()
        with connect(ws_url, max_size=None) as ws:
            client = EngineClient(ws, ws_url)
            client.wait_ready()
            client.call({"cmd": "slow_motion", "interval_s": 1 / args.rate})
            client.run_load(args.rows, 8)  # warm-up, not traced
            load = threading.Thread(target=client.run_load, args=(args.requests, args.max_tokens))
            load.start()
            time.sleep(args.settle_s)
            if args.no_draw:
                page.evaluate(no_draw_js(args.no_draw))
            browser.start_tracing(page=page, categories=CATEGORIES)
            time.sleep(args.seconds)
            fps = page.evaluate("(() => { const r = document.querySelector('.ifl-root');"  # (its last second)
                                " return {fps: +r.dataset.fps || 0, frame_ms: +r.dataset.frameMs || 0}; })()")
            sight = page.evaluate(IN_SIGHT)
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            raw = browser.stop_tracing()
            load.join()
            client.close()
        browser.close()
    trace = json.loads(raw)
    per_s, busy = main_thread_ms(trace, args.seconds)
    return {"seconds": args.seconds, "rows": args.rows, "rate": args.rate, "requests": args.requests,
            "no_draw": args.no_draw, "watch": args.watch, "in_sight": sight,
            "busy_share": busy, "frames_per_s": frames_per_s(trace, args.seconds), "ms_per_s": dict(per_s[:args.top]),
            "at_end": fps}


def render(result: dict) -> str:
    lines = [f"{MAIN}: busy {100 * result['busy_share']:.0f}% of {result['seconds']:g} s, "
             f"{result['frames_per_s']:.1f} animation frames a second; ms a second by slice name:"]
    lines += [f"{ms:8.1f}  {name}" for name, ms in result["ms_per_s"].items()]
    lines.append(f"the views' own count in the last second: {result['at_end']['fps']} frames, "
                 f"{result['at_end']['frame_ms']} ms each")
    lines.append("in sight at the end: " + (", ".join(k for k, v in result["in_sight"].items() if v) or "nothing"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.tab_trace", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="how long to trace")
    ap.add_argument("--settle-s", type=float, default=3.0, help="load run before the trace starts")
    ap.add_argument("--rows", type=int, default=256, help="rows a lane (max_num_seqs, static batch)")
    ap.add_argument("--rate", type=float, default=150.0, help="at most this many steps a second a lane")
    ap.add_argument("--requests", type=int, default=2048, help="requests sent (a multiple of --rows)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--top", type=int, default=30, help="slice names kept")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--app-cpus", default=None, help="pin the app to these CPUs, e.g. 0 (Linux)")
    ap.add_argument("--browser-cpus", default=None, help="pin the browser to these CPUs, e.g. 1")
    ap.add_argument("--no-draw", default="", metavar="MODULES",
                    help="live view modules that draw nothing while traced, e.g. Slots,UtilView (what they cost, "
                         "by difference)")
    ap.add_argument("--watch", choices=("timeline", "kv"), default="timeline",
                    help="the views in sight while traced: the timeline, or the KV maps")
    ap.add_argument("--json", default=None)
    ap.add_argument("--screenshot", default=None, metavar="PNG", help="the tab as the trace ends")
    args = ap.parse_args(argv)
    try:
        no_draw_js(args.no_draw)  # (a bad name fails before the app starts)
    except ValueError as e:
        ap.error(str(e))
    check_full_batches(args.requests, args.rows)
    result = trace_tab(args)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
