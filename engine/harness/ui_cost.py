"""python -m engine.harness.ui_cost: what open browser tabs cost the engine, and their frame rate.

Starts `streamlit run app.py`, then for each tab count (interleaved rounds) opens that many
chromium tabs on the playground, runs the same fixed load through /engine/ws and records:
the engines' step time (from their own step events), output tokens/s, each tab's frames/s and
mean frame time (from the live view's counters), and the browser's CPU use.

  python -m engine.harness.ui_cost --tabs 0,2 --rounds 2 [--model M] [--requests 8 --max-tokens 64]

At a GPU's pace (engine/harness/gpu_pace.py: a tiny random model, two lanes of --rows rows over a pool of
131,072 blocks, each lane's steps capped at --rate a second), also what a tab's socket carries and what
a recording of it takes:

  python -m engine.harness.ui_cost --gpu-pace --rows 256 --rate 150 --requests 1024 --max-tokens 128

--spy adds how much of a core the app's threads ran in each round, by group (the engines, torch's own
threads, the server's event loop, the page sessions), named by py-spy (engine/harness/thread_spy.py).

Needs playwright and chromium (`apt-get install chromium`); see docs/room.md.
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
from contextlib import nullcontext
from pathlib import Path

from .app_process import CHROMIUM_ARGS, cpu_set, on_cpus, running_app
from .engine_client import EngineClient, p50
from .gpu_pace import SocketMeter, app_env, check_full_batches
from .page_state import wait_on_page
from .thread_spy import GROUPS, ThreadSpy, cpu_s, stat_fields


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m engine.harness.ui_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tabs", default="0,2", help="comma-separated tab counts to compare")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per tab count")
    ap.add_argument("--requests", type=int, default=8,
                    help="requests per round, all at once (a multiple of the static batch size)")
    ap.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (EOS ignored)")
    ap.add_argument("--model", default=None, help="default: $INFLIGHT_MODEL or the app's default model")
    ap.add_argument("--port", type=int, default=8611)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--app-cpus", default=None,
                    help="pin the app (engines, server) to these CPUs, e.g. 0 (Linux); the browser gets "
                         "--browser-cpus: isolates what tabs cost the server from the CPU time they draw with")
    ap.add_argument("--browser-cpus", default=None, help="pin the browser to these CPUs, e.g. 1")
    ap.add_argument("--json", default=None, help="write the per-round records as JSON")
    ap.add_argument("--gpu-pace", action="store_true",
                    help="lanes at a GPU's pace: a tiny random model, --rows rows a lane, --rate steps a second")
    ap.add_argument("--rows", type=int, default=256, help="--gpu-pace: rows a lane (max_num_seqs, static batch)")
    ap.add_argument("--rate", type=float, default=150.0,
                    help="--gpu-pace: at most this many steps a second a lane (the service's slow motion)")
    ap.add_argument("--spy", action="store_true",
                    help="how much of a core the app's threads ran during each load, by group: the engines, torch's "
                         "own threads, the server's event loop, the page sessions (needs py-spy; thread_spy.py)")
    return ap.parse_args(argv)


# ---- the app under test ----------------------------------------------------------------------------

def open_tabs(browser, url: str, n: int) -> list:
    pages = []
    for _ in range(n):
        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
        pg.goto(url, wait_until="domcontentloaded")
        pages.append(pg)
    for pg in pages:
        pg.locator(".ifl-root").first.wait_for(timeout=120_000)
        wait_on_page(pg, "document.querySelector('.ifl-conn')?.dataset.kind === 'live'", 60, "the tab's socket live")
        pg.locator(".ifl-timeline-canvas").first.scroll_into_view_if_needed()  # watching the Gantt
    return pages


def sample_tabs(pages, samples: list) -> None:
    """Each tab's frames in the last second and its mean frame time (the live view's own counters)."""
    for i, pg in enumerate(pages):
        d = pg.evaluate("(() => { const r = document.querySelector('.ifl-root');"
                        " const c = document.querySelector('.ifl-timeline-canvas').getBoundingClientRect();"
                        " return r ? {fps: +r.dataset.fps || 0, ms: +r.dataset.frameMs || 0,"
                        " gantt_on_screen: c.bottom > 0 && c.top < window.innerHeight} : null; })()")
        if d:
            samples.append({"tab": i, **d})


def browser_cpu_s() -> float:
    """CPU seconds used so far by the chromium processes this benchmark started (Linux /proc)."""
    if not Path("/proc").exists():
        return 0.0
    total = 0.0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            exe = (p / "cmdline").read_bytes().split(b"\0")[0]
            stat = (p / "stat").read_text()
        except OSError:
            continue
        if b"chrom" in exe and _descends_from_me(int(stat_fields(stat)[1])):
            total += cpu_s(stat)
    return total


def app_pid() -> int:
    """The app this benchmark started (its `streamlit run` child)."""
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes()
            parent = int(stat_fields((p / "stat").read_text())[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"streamlit" in cmd and b"app.py" in cmd:
            return int(p.name)
    raise RuntimeError("the app's process is not found")


def _descends_from_me(pid: int) -> bool:
    me = os.getpid()
    for _ in range(16):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(stat_fields(Path(f"/proc/{pid}/stat").read_text())[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


# ---- one round and the report ---------------------------------------------------------------------

def run_round(client, browser, url: str, n_tabs: int, args) -> dict:
    pages = open_tabs(browser, url, n_tabs) if n_tabs else []
    time.sleep(2)  # let the tabs settle (first draw, plotly load)
    cpu0 = browser_cpu_s()
    samples: list = []
    with (ThreadSpy(app_pid()) if args.spy else nullcontext()) as spy, SocketMeter(client.ws_url) as meter:
        res = client.run_load(args.requests, args.max_tokens, on_tick=lambda: sample_tabs(pages, samples))
    res["socket"] = meter.figures()
    if spy is not None:
        res["threads_pct"] = spy.share_of_core()
    res["browser_cpu_pct"] = 100 * (browser_cpu_s() - cpu0) / res["wall_s"]
    busy = [s for s in samples if s["fps"] > 0]
    res["fps_p50"] = p50([s["fps"] for s in samples]) if samples else None
    res["gantt_on_screen"] = all(s["gantt_on_screen"] for s in samples)
    res["frame_ms_mean"] = statistics.fmean(s["ms"] for s in busy) if busy else None
    res["tabs"] = n_tabs
    for pg in pages:
        pg.close()
    return res


def report(records: list[dict]) -> str:
    """Each round's table, then per tab count: the median over rounds of the step time against the
    same round's 0-tab run (rounds interleave tab counts, so drift on a noisy machine cancels)."""
    base = {(r["round"], s): v["decode_step_ms_p50"] for r in records if r["tabs"] == 0
            for s, v in r["strategies"].items()}
    lines = ["round | tabs | strategy | decode step p50 (ms) | vs 0 tabs | steps/s | tok/s | tab fps p50 | frame ms | "
             "browser CPU %", "---|---|---|---|---|---|---|---|---|---"]
    slow: dict[int, list[float]] = {}
    for r in records:
        for s, v in r["strategies"].items():
            ms, b = v["decode_step_ms_p50"], base.get((r["round"], s))
            rel = ms / b - 1 if ms and b else None
            if rel is not None and r["tabs"]:
                slow.setdefault(r["tabs"], []).append(rel)
            lines.append(f"{r['round']} | {r['tabs']} | {s} | {_fmt(ms)} | {_pct(rel)} | {v['steps'] / v['wall_s']:.0f} | "
                         f"{v['tokens_per_s']:.1f} | "
                         f"{_fmt(r['fps_p50'])} | {_fmt(r['frame_ms_mean'])} | {r['browser_cpu_pct']:.0f}")
    lines += ["", "tabs | decode step vs 0 tabs (median) | tab fps (median) | frame ms (mean) | browser CPU % (mean)",
              "---|---|---|---|---"]
    for n in sorted(slow):
        rs = [r for r in records if r["tabs"] == n]
        fps = [r["fps_p50"] for r in rs if r["fps_p50"] is not None]
        ms = [r["frame_ms_mean"] for r in rs if r["frame_ms_mean"] is not None]
        lines.append(f"{n} | {_pct(statistics.median(slow[n]))} | {_fmt(p50(fps))} | "
                     f"{_fmt(statistics.fmean(ms) if ms else None)} | {statistics.fmean(r['browser_cpu_pct'] for r in rs):.0f}")
    lines += ["", "round | tabs | socket KB/s a client | on the network | socket messages/s | steps/s (all lanes) | "
              "key frames | recording MB/min | gzipped", "---|---|---|---|---|---|---|---|---"]
    for r in records:
        k = r["socket"]
        wire = f"{k['wire_kb_per_s']:.0f}" + (" (deflated)" if k.get("deflate") else "")
        lines.append(f"{r['round']} | {r['tabs']} | {k['socket_kb_per_s']:.0f} | {wire} | "
                     f"{k['socket_messages_per_s']:.0f} | "
                     f"{k['steps_per_s']:.0f} | {k['key_frames']} | {k['recording_mb_per_min']:.1f} | "
                     f"{k['recording_gzip_mb_per_min']:.1f}")
    return "\n".join(lines + _threads_table(records))


def _threads_table(records: list[dict]) -> list[str]:
    """--spy: per tab count, the median share of a core each group of the app's threads ran (CPU time)."""
    spied = [r for r in records if "threads_pct" in r]
    if not spied:
        return []
    lines = ["", "tabs | " + " | ".join(f"{g} (% of a core)" for g in GROUPS) + " | rounds",
             "|".join(["---"] * (len(GROUPS) + 2))]
    for n in sorted({r["tabs"] for r in spied}):
        rs = [r["threads_pct"] for r in spied if r["tabs"] == n]
        lines.append(f"{n} | " + " | ".join(f"{statistics.median(r[g] for r in rs):.1f}" for g in GROUPS)
                     + f" | {len(rs)}")
    return lines


def _pct(x):
    return "–" if x is None else f"{100 * x:+.1f}%"


def _fmt(x):
    return "–" if x is None else f"{x:.1f}"


def main(argv=None) -> int:
    args = parse_args(argv)
    from playwright.sync_api import sync_playwright
    from websockets.sync.client import connect
    tab_counts = [int(x) for x in args.tabs.split(",")]
    if args.gpu_pace:
        check_full_batches(args.requests, args.rows)
    env = {**os.environ, **({"INFLIGHT_MODEL": args.model} if args.model else {})}
    work = Path(tempfile.mkdtemp(prefix="ui-cost-"))
    if args.gpu_pace:
        env.update(app_env(work, args.rows))
    records = []
    ws_url = f"ws://127.0.0.1:{args.port}/engine/ws"
    with running_app(args.port, env, cpus=cpu_set(args.app_cpus)) as url, \
            on_cpus(args.browser_cpus), sync_playwright() as p:  # (playwright's driver starts chromium: both inherit)
        browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        warm = open_tabs(browser, url, 1)  # the first page load starts the engines
        with connect(ws_url, max_size=None) as ws:
            client = EngineClient(ws, ws_url)
            client.wait_ready()
            warm[0].close()
            if args.gpu_pace:
                client.call({"cmd": "slow_motion", "interval_s": 1 / args.rate})
            client.run_load(args.requests, 8)  # warm-up, not measured
            for rnd in range(args.rounds):
                for n in tab_counts:
                    rec = run_round(client, browser, url, n, args)
                    rec["round"] = rnd
                    records.append(rec)
                    print(f"round {rnd} tabs {n}: " + json.dumps(rec), file=sys.stderr)
            client.close()
        browser.close()
    print(report(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
