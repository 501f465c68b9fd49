"""python -m engine.harness.gpu_socket: the socket at a real device's pace, without a browser (issue #42).

The app's routes (engine/api/server.py, the /engine/ws that `streamlit run app.py` serves) run over two
lanes of --rows rows each, continuous batching beside static, on this machine's device, in a server
process of their own as the app's are. From this process the same fixed load (engine_client.py) runs in
interleaved rounds with no socket client and with --clients clients subscribed as a live tab is
(gpu_pace.SocketMeter): each lane's decode step and tokens a second with and without clients (each round's
pair compared, then the median), what each client received a second (the messages' text, and what the
network carried with per-message deflate; over the meter's life and over the steps it saw), and, with
--record, one more load before the rounds recorded by the app's own recorder (not timed: the recorder
works in the server's process), as a file the offline page and the app's replay play.

  python -m engine.harness.gpu_socket --model random:Qwen2.5-0.5B-Instruct --device cuda --rows 256 \\
      --requests 512 --max-tokens 128 --clients 2 --rounds 2 --record gpu.jsonl.gz --json gpu_socket.json

Run it where the lanes are fast (a GPU): on a CPU, engine/harness/ui_cost.py --gpu-pace imitates that pace.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from .app_process import free_port
from .engine_client import EngineClient, p50
from .gpu_pace import SocketMeter

LANES = ("continuous", "static")
BATCHED_TOKENS = 8192  # a step's token budget (docs/perf/run_gpu.sh's BUDGET)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.gpu_socket", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve-port", type=int, default=None, help=argparse.SUPPRESS)  # the server process
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--rows", type=int, default=256, help="each lane's batch (max_num_seqs, static_batch_size)")
    ap.add_argument("--kv-memory-gb", type=float, default=24.0, help="each lane's KV pool")
    ap.add_argument("--requests", type=int, default=512, help="a multiple of --rows")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record", type=Path, default=None, help="record the first round here (.jsonl.gz)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--start-timeout", type=float, default=600.0, help="seconds the lanes may take to be ready")
    args = ap.parse_args(argv)
    for name in ("rows", "requests", "max_tokens", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.clients < 0:
        ap.error("--clients must be 0 or more")
    if args.requests % args.rows:  # static batching waits for a full batch: a last partial one would never run
        ap.error(f"--requests ({args.requests}) must be a multiple of --rows ({args.rows})")
    return args


def serve(args) -> None:
    """The server process: the app's routes over the two lanes; with --record, the first load recorded."""
    import dataclasses

    import uvicorn

    from ..api.server import create_app
    from ..api.ws import PING_S
    from ..config import EngineConfig
    from ..serving.service import EngineService
    from .soak_server import WS_MAX_BYTES
    cfg = EngineConfig(model=args.model, device=args.device, dtype=args.dtype, max_num_seqs=args.rows,
                       static_batch_size=args.rows, kv_cache_memory_gb=args.kv_memory_gb,
                       max_num_batched_tokens=BATCHED_TOKENS)
    svc = EngineService(cfg, lanes={s: dataclasses.replace(cfg, strategy=s) for s in LANES}, hub_capacity=100_000)
    try:
        svc.wait_ready(args.start_timeout)
        if args.record:
            threading.Thread(target=record_first_load, args=(svc, args.record), daemon=True).start()
        uvicorn.run(create_app(svc), host="127.0.0.1", port=args.serve_port, log_level="warning",
                    ws_ping_interval=PING_S, ws_ping_timeout=PING_S, ws_max_size=WS_MAX_BYTES)
    finally:
        svc.stop()


def record_first_load(svc, path: Path) -> None:
    """Record from now until the first load has been served (the lanes busy, then idle for a second);
    then write what was recorded beside it (<path>.json), which tells the client the file is complete."""
    from ..workshop.recording.recorder import start_recording, stop_recording
    rec = start_recording(svc, path)
    while svc.idle():
        time.sleep(0.01)
    quiet_since = None
    while quiet_since is None or time.monotonic() - quiet_since < 1.0:
        time.sleep(0.05)
        quiet_since = (quiet_since or time.monotonic()) if svc.idle() else None
    stop_recording(svc)
    done = {"events": rec.events, "skipped": rec.skipped, "full": rec.full, "seconds": svc.clock() - rec.t0,
            "bytes": path.stat().st_size}
    part = Path(f"{path}.json.part")
    part.write_text(json.dumps(done))
    part.replace(marker(path))  # (whole, or not there: the client polls for it)


def connect_when_up(url: str, server: subprocess.Popen, timeout: float):
    """A websocket to the server once it answers (its lanes loaded, compiled and warm)."""
    from websockets.sync.client import connect
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}) before it served")
        try:
            return connect(url, max_size=None)
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(f"no server at {url} after {timeout:.0f} s")


def run_rounds(client: EngineClient, url: str, args) -> tuple[list[dict], dict | None]:
    """Interleaved rounds of the load with no client and with --clients meters reading the socket, after the
    recorded load where --record asks for one; returns the rounds and what was recorded."""
    recorded = None
    if args.record:
        client.run_load(args.requests, args.max_tokens)
        recorded = wait_recorded(args.record)
    records = []
    for r in range(args.rounds):
        for n in dict.fromkeys((0, args.clients)):
            with ExitStack() as stack:
                meters = [stack.enter_context(SocketMeter(url)) for _ in range(n)]
                res = client.run_load(args.requests, args.max_tokens)
            res.update(round=r, clients=n, meters=[m.figures() for m in meters])
            records.append(res)
            print(f"round {r}, {n} clients: " + ", ".join(
                f"{s} {v['tokens_per_s']:.0f} tok/s, decode step p50 {_ms(v['decode_step_ms_p50'])}"
                for s, v in res["strategies"].items()), flush=True)
    return records, recorded


def _ms(x) -> str:
    return "-" if x is None else f"{x:.2f} ms"


def marker(path: Path) -> Path:
    """Where the server says what it recorded, once the recording is complete."""
    return Path(f"{path}.json")


def wait_recorded(path: Path, timeout: float = 120.0) -> dict:
    done = marker(path)
    deadline = time.monotonic() + timeout
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the recording {path} was not complete after {timeout:.0f} s")
        time.sleep(0.2)
    return json.loads(done.read_text())


def summary(records: list[dict]) -> dict:
    """Per client count: each lane's decode step p50 and tokens a second (the median over rounds), its
    slowdown against the same round's run without clients (the median of the rounds' pairs), and the
    clients' socket figures (medians)."""
    def med(xs):
        return p50([x for x in xs if x is not None])
    base = {r["round"]: r["strategies"] for r in records if r["clients"] == 0}
    out = {}
    for n in sorted({r["clients"] for r in records}):
        rs = [r for r in records if r["clients"] == n]
        lanes = {s: {"decode_step_ms_p50": med(r["strategies"][s]["decode_step_ms_p50"] for r in rs),
                     "tokens_per_s": med(r["strategies"][s]["tokens_per_s"] for r in rs),
                     "slowdown_pct": med(_slowdown(base.get(r["round"], {}).get(s), r["strategies"][s]) for r in rs)}
                 for s in rs[0]["strategies"]}
        meters = [m for r in rs for m in r["meters"]]
        socket = {k: med(m[k] for m in meters) for k, v in meters[0].items() if isinstance(v, (int, float))} \
            if meters else None
        out[str(n)] = {"lanes": lanes, "socket_per_client": socket}
    return out


def _slowdown(base: dict | None, lane: dict) -> float | None:
    """How much slower a lane served its load than in the same round without clients (% of tokens a second)."""
    if not base or not base["tokens_per_s"] or not lane["tokens_per_s"]:
        return None
    return 100 * (base["tokens_per_s"] / lane["tokens_per_s"] - 1)


def server_command(args, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "engine.harness.gpu_socket", "--serve-port", str(port), "--device", args.device,
           "--rows", str(args.rows), "--kv-memory-gb", str(args.kv_memory_gb),
           "--start-timeout", str(args.start_timeout)]
    for flag, value in (("--model", args.model), ("--dtype", args.dtype), ("--record", args.record)):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:  # (it holds the device: it must not outlive the run)
        server.kill()
        server.wait(30)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.serve_port is not None:
        serve(args)
        return 0
    if args.record:  # a file from an earlier run must not pass for this one's
        for old in (args.record, marker(args.record)):
            old.unlink(missing_ok=True)
    port = free_port()
    url = f"ws://127.0.0.1:{port}/engine/ws"
    server = subprocess.Popen(server_command(args, port))
    t0 = time.monotonic()
    try:
        with connect_when_up(url, server, args.start_timeout) as ws:
            client = EngineClient(ws, url)
            client.wait_ready()
            started_s = time.monotonic() - t0
            status = client.call({"cmd": "status"})["status"]
            records, recorded = run_rounds(client, url, args)
    finally:
        stop_server(server)
    result = {"config": vars(args) | {"record": str(args.record), "json": str(args.json)},
              "server_start_s": started_s, "engines": status["engines"], "recording": recorded,
              "rounds": records, "summary": summary(records)}
    print(json.dumps(result["summary"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
