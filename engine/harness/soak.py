"""Chaos and soak harness: a server in room mode under Poisson load, random disconnects and aborts,
malformed and fuzzed frames, fuzzed OpenAI and /join bodies and recording uploads (engine/harness/fuzz.py),
settings changes and injected step faults; then the books are checked.

    python -m engine.harness.soak --minutes 30                 # the default model
    python -m engine.harness.soak --minutes 0.5 --model DIR    # a tiny model (what the test suite runs)

Reports requests submitted / completed / aborted / errored / refused / lost (lost must be 0: every
request ends with an outcome its client saw, and every request the server accepted ends in a
`finished` event), KV blocks still in use once idle (must be 0), the server's RSS over time and
latency percentiles; fuzzed inputs sent and answered (a 5xx or an unanswered one is a failure), fuzzed
uploads played, refused and failed (must be 0). Exit status 1 if anything was lost, leaked or failed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .app_process import free_port, stop_process
from .soak_clients import (
    Load,
    Monitor,
    SocketClient,
    Tally,
    busy,
    fuzzer,
    http_load,
    presenter_changes,
    server_status,
    viewer_tries_controls,
)
from .hostile_remote import LANE as HOSTILE_LANE, MIXED
from ..workshop.prompts import load_prompts

IDLE_TIMEOUT_S = 300.0
VIEWER_KEY = "soak-viewer-key"  # soak_server's default API key: the fuzzer calls the API as a viewer
SETTINGS = [{"max_num_seqs": 8}, {"block_size": 32}, {"max_num_seqs": 16}, {"block_size": 16}]


def server_args(model: str | None, port: int, token: str, fault_rate: float, **engine_flags) -> list[str]:
    """The soak server's command-line arguments. Each value is joined to its flag (--token=...): a random
    token that starts with "-" would otherwise read as a flag (the server exited with 2 now and then)."""
    args = [f"--port={port}", f"--token={token}", f"--fault-rate={fault_rate}"] + ([f"--model={model}"] if model else [])
    for name, value in engine_flags.items():
        if value is True:  # a switch
            args.append(f"--{name.replace('_', '-')}")
        elif value is not None and value is not False:
            args.append(f"--{name.replace('_', '-')}={value}")
    return args


@contextmanager
def soak_server(model: str | None, port: int, token: str, fault_rate: float, log, **engine_flags):
    cmd = [sys.executable, "-m", "engine.harness.soak_server", *server_args(model, port, token, fault_rate,
                                                                             **engine_flags)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        _wait_port(port, proc)
        yield proc
    finally:
        stop_process(proc, 30)


@contextmanager
def hostile_server(on: bool, log):
    """A HostileRemote in a process of its own (its memory is not the app's), on the mixed mode: its URL."""
    if not on:
        yield None
        return
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engine.harness.hostile_remote", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, 60)
        yield f"http://127.0.0.1:{port}/{MIXED}/v1"
    finally:
        stop_process(proc, 10)


def _wait_port(port: int, proc, timeout: float = 900) -> None:
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the soak server exited with {proc.returncode} (see its log)")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError("the soak server did not start")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _sample_rss(pid: int, every_s: float, t0: float, out: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        out.append((round(time.monotonic() - t0, 1), round(rss_mb(pid), 1)))
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except TimeoutError:
            pass


async def drive(base: str, token: str, pid: int, seconds: float, rate: float, seed: int,
                max_tokens: tuple, config_every_s: float, fuzz_every_s: float | None) -> dict:
    t0 = time.monotonic()
    load = Load(base, token, [p["prompt"] for p in load_prompts()], random.Random(seed), Tally(),
                t0 + seconds, rate, max_tokens)
    monitor, rss, stop = Monitor(base, token), [], asyncio.Event()
    watchers = [asyncio.create_task(monitor.run()),
                asyncio.create_task(_sample_rss(pid, max(1.0, seconds / 60), t0, rss, stop))]
    await asyncio.sleep(0.5)  # the monitor subscribes before the first request
    fuzzing = [fuzzer(load, fuzz_every_s, VIEWER_KEY)] if fuzz_every_s else []
    await asyncio.gather(http_load(load, 0.5), *(SocketClient(load, 0.25).run() for _ in range(2)),
                         presenter_changes(load, config_every_s, SETTINGS),
                         viewer_tries_controls(load, max(2.0, seconds / 20)), *fuzzing)
    status = await _wait_idle(base, token)
    await asyncio.sleep(1.0)  # the monitor reads the last finished events
    stop.set()
    for w in watchers:
        w.cancel()
    return _report(load.tally, monitor, status, rss, time.monotonic() - t0)


async def _wait_idle(base: str, token: str) -> dict:
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while True:
        status = await server_status(base, token)
        if not busy(status) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.5)


def _report(t: Tally, monitor: Monitor, status: dict, rss: list, elapsed: float) -> dict:
    lat = np.array(t.latencies_s) if t.latencies_s else np.array([np.nan])
    unfinished = monitor.unfinished()
    warm = [mb for s, mb in rss if s >= elapsed * 0.2] or [mb for _, mb in rss]
    return {
        "elapsed_s": round(elapsed, 1), "submitted": t.submitted, "completed": t.completed, "aborted": t.aborted,
        "errored": t.errored, "refused": t.refused, "lost": t.lost + len(unfinished),
        "lost_client_side": t.lost, "lost_how": t.lost_how, "unfinished_on_server": [list(u) for u in unfinished[:20]],
        "server_requests": len(monitor.accepted), "monitor_skipped_events": monitor.skipped,
        "kv_blocks_leaked": sum(e["kv_used_blocks"] or 0 for e in status["engines"].values()),
        "in_flight_after": sum(e["in_flight"] for e in status["engines"].values()),
        "latency_p50_s": round(float(np.nanpercentile(lat, 50)), 3),
        "latency_p99_s": round(float(np.nanpercentile(lat, 99)), 3),
        "malformed_sent": t.malformed_sent, "malformed_answered": t.malformed_answered,
        "controls_refused": t.controls_refused, "configures": t.configures, "reconnects": t.reconnects,
        "fuzz_sent": t.fuzz_sent, "fuzz_answered": t.fuzz_answered, "fuzz_faulted": t.fuzz_faulted,
        "fuzz_5xx": t.fuzz_5xx, "fuzz_5xx_how": t.fuzz_5xx_how,
        "rss_mb_after_warmup": warm[0] if warm else None, "rss_mb_end": rss[-1][1] if rss else None,
        "rss_mb_max_after_warmup": max(warm) if warm else None, "rss_samples": rss,
        **_hostile(monitor),
    }


def _hostile(monitor: Monitor) -> dict:
    """The hostile remote lane's requests (soak_server --hostile-lane), and how they ended."""
    ended = [reason for (lane, _), reason in monitor.ended.items() if lane == HOSTILE_LANE]
    if not any(lane == HOSTILE_LANE for lane, _ in monitor.accepted):
        return {}
    return {"hostile_requests": sum(lane == HOSTILE_LANE for lane, _ in monitor.accepted),
            "hostile_errors": ended.count("error"), "hostile_other_ends": len(ended) - ended.count("error")}


def table(r: dict) -> str:
    cols = ["submitted", "completed", "aborted", "errored", "refused", "lost", "kv_blocks_leaked",
            "latency_p50_s", "latency_p99_s", "rss_mb_after_warmup", "rss_mb_max_after_warmup", "rss_mb_end",
            "fuzz_sent", "fuzz_answered", "fuzz_5xx", "uploads", "uploads_played", "uploads_refused", "uploads_failed",
            "hostile_requests", "hostile_errors", "hostile_other_ends"]
    return ("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n| "
            + " | ".join(str(r.get(c, "-")) for c in cols) + " |")


def failed(r: dict) -> bool:
    """Something lost, leaked, answered with a 5xx, left unanswered, or an upload that failed oddly."""
    return bool(r["lost"] or r["kv_blocks_leaked"] or r["fuzz_5xx"] or r["fuzz_answered"] != r["fuzz_sent"]
                or r.get("uploads_failed"))


def run_soak(minutes: float, model: str | None = None, rate: float = 0.7, seed: int = 0,
             fault_rate: float = 0.002, max_tokens: tuple = (8, 48), config_every_s: float | None = None,
             num_kv_blocks: int | None = None, log_path: str = os.devnull, port: int | None = None,
             fuzz_every_s: float | None = 1.0, uploads_every_s: float | None = 5.0, split_lane: bool = False,
             hostile_lane: bool = False, heap_report: str | None = None, heap_every_s: float = 60.0) -> dict:
    """fuzz_every_s / uploads_every_s: mean seconds between fuzzed inputs / fuzzed recording uploads
    (None: none); split_lane: a disaggregated lane beside the continuous and static ones; hostile_lane: a
    remote lane whose server misbehaves in every way in turn (engine/harness/hostile_remote.py); heap_report:
    where the server writes its Python heap's growth every heap_every_s (engine/harness/heap_watch.py)."""
    port = port or free_port()
    token = secrets.token_urlsafe(18)
    seconds = minutes * 60
    with tempfile.TemporaryDirectory() as tmp, open(log_path, "w") as log:
        report = Path(tmp) / "uploads.json"
        uploads = dict(uploads_every=uploads_every_s, uploads_report=report) if uploads_every_s else {}
        with hostile_server(hostile_lane, log) as hostile_url, \
                soak_server(model, port, token, fault_rate, log, num_kv_blocks=num_kv_blocks, split_lane=split_lane,
                            hostile_url=hostile_url, heap_report=heap_report,
                            heap_every=heap_every_s if heap_report else None, **uploads) as proc:
            result = asyncio.run(drive(f"127.0.0.1:{port}", token, proc.pid, seconds, rate, seed, max_tokens,
                                       config_every_s or max(5.0, seconds / 8), fuzz_every_s))
        if report.exists():
            result.update(json.loads(report.read_text()))
    result.update(minutes=minutes, model=model or "default", rate=rate, fault_rate=fault_rate, seed=seed)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--model", default=None, help="hub id or local directory (default: the default model)")
    ap.add_argument("--rate", type=float, default=0.7, help="submissions per second over all clients")
    ap.add_argument("--fault-rate", type=float, default=0.002, help="share of engine steps that raise")
    ap.add_argument("--max-tokens", default="8,48", help="output length range, e.g. 8,48")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fuzz-every", type=float, default=1.0, help="mean seconds between fuzzed inputs (0: off)")
    ap.add_argument("--uploads-every", type=float, default=5.0,
                    help="mean seconds between fuzzed recording uploads (0: off)")
    ap.add_argument("--split-lane", action="store_true", help="a disaggregated lane beside the other two")
    ap.add_argument("--hostile-lane", action="store_true",
                    help="a remote lane whose server misbehaves in every way in turn (it must cost bounded memory)")
    ap.add_argument("--heap-report", default=None,
                    help="the server writes tracemalloc's view of its Python heap here, every minute (JSON)")
    ap.add_argument("--json", default=None, help="write the full result here")
    ap.add_argument("--log", default=os.devnull, help="the server's log")
    args = ap.parse_args(argv)
    lo, hi = (int(x) for x in args.max_tokens.split(","))
    r = run_soak(args.minutes, args.model, args.rate, args.seed, args.fault_rate, (lo, hi), log_path=args.log,
                 fuzz_every_s=args.fuzz_every or None, uploads_every_s=args.uploads_every or None,
                 split_lane=args.split_lane, hostile_lane=args.hostile_lane, heap_report=args.heap_report)
    print(table(r))
    print(f"RSS MB over time (s, MB): {r['rss_samples'][:: max(1, len(r['rss_samples']) // 12)]}")
    print(f"malformed frames answered {r['malformed_answered']}/{r['malformed_sent']}, viewer controls refused "
          f"{r['controls_refused']}, settings changes {r['configures']}, reconnects {r['reconnects']}, "
          f"monitor skipped {r['monitor_skipped_events']} events; fuzzed inputs answered {r['fuzz_answered']}/"
          f"{r['fuzz_sent']} ({r['fuzz_faulted']} ended by an injected fault, {r['fuzz_5xx']} other 5xx); "
          f"uploads played {r.get('uploads_played', 0)}, refused {r.get('uploads_refused', 0)}, "
          f"failed {r.get('uploads_failed', 0)}")
    for how in r["lost_how"]:
        print(f"lost: {how}")
    for how in r["fuzz_5xx_how"]:
        print(f"fuzzed input answered 5xx: {how}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 1 if failed(r) else 0


if __name__ == "__main__":
    sys.exit(main())
