"""A plain /engine/ws client that submits a fixed load and reads the engines' step events: the load that
engine/harness/ui_cost.py and engine/harness/gpu_socket.py time the views and the socket against."""
from __future__ import annotations

import json
import statistics
import time

import websockets.sync.client
from websockets.exceptions import ConnectionClosed

from ..events import ENTRY_FIELDS, PREFILL, StepMessage, StepRows, full_entries

PHASE = ENTRY_FIELDS.index("phase")  # a step entry is a list in ENTRY_FIELDS order
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


class EngineClient:
    """A plain /engine/ws client: submits the load and reads the engines' step events."""

    def __init__(self, ws, ws_url: str):
        self.ws, self.ws_url = ws, ws_url
        self.pending: list[dict] = []
        self.call({"cmd": "subscribe", "kv": False, "requests": []})

    def call(self, msg: dict) -> dict:
        self.ws.send(json.dumps({**msg, "ref": "bench"}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("ref") != "bench":
                self.pending.append(reply)  # events that arrived meanwhile: run_load reads them
                continue
            if reply["type"] == "error":
                raise RuntimeError(reply["message"])
            return reply

    def wait_ready(self, timeout: float = 600) -> list[str]:
        """The live lanes' names once every one is ready. While the engines load, the socket may be serving
        the landing page's replay (its status says every lane is ready): the server closes that socket when
        the engines are ready, and this reconnects to them."""
        deadline = time.monotonic() + timeout
        status = {}
        while time.monotonic() < deadline:
            try:
                status = self.call({"cmd": "status"})["status"]
            except ConnectionClosed:
                self._reconnect()
                continue
            engines = status["engines"]
            if "replay" not in status and engines and all(e["ready"] for e in engines.values()):
                return list(engines)
            time.sleep(1)
        if "replay" in status:
            raise TimeoutError("a recording is still playing in the views: the engines' events wait for it to end")
        raise TimeoutError("engines did not become ready")

    def _reconnect(self) -> None:
        """A new socket in place of the one the server closed (tried again a second later if it fails too)."""
        try:
            self.ws = websockets.sync.client.connect(self.ws_url, max_size=None)
            self.call({"cmd": "subscribe", "kv": False, "requests": []})
        except (ConnectionClosed, OSError):
            time.sleep(1)

    def close(self) -> None:
        """Closes the socket in use (a reconnected one is not the caller's)."""
        self.ws.close()

    def run_load(self, n: int, max_tokens: int, on_tick=None) -> dict:
        """Submit n requests at once (without waiting for each answer); collect step events until every
        engine finished them all."""
        params = {"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
        self.pending.clear()
        self.call({"cmd": "pause"})  # every request queued before the first step: the lanes fill at once
        try:
            for i in range(n):
                self.ws.send(json.dumps({"cmd": "submit", "prompt": PROMPT, "params": params, "tag": "bench",
                                         "ref": f"load-{i}"}))
        finally:
            self.call({"cmd": "resume"})  # (answered after every submit: the socket runs commands in order)
        t0 = last_tick = time.monotonic()
        done: dict[str, int] | None = None  # lane -> requests finished (known from the first answer)
        steps: dict[str, list] = {}
        finished_at: dict[str, float] = {}   # when each engine finished the last request
        rows = StepRows()  # every step's rows whole (each pool's first comes whole: the socket sees to it)
        while done is None or any(v < n for v in done.values()):
            msg = self.pending.pop(0) if self.pending else json.loads(self.ws.recv(timeout=120))
            if msg.get("type") == "error":
                raise RuntimeError(msg["message"])
            if done is None and msg.get("type") == "reply" and msg.get("cmd") == "submit":  # (kept by call)
                done, steps = {s: 0 for s in msg["lanes"]}, {s: [] for s in msg["lanes"]}
            if msg.get("skipped"):
                rows = StepRows()  # (the socket sends each pool's next step whole)
            stepped = [rows.resolve(ev) for ev in msg.get("events", []) if ev.get("type") == StepMessage.TYPE]
            for ev in stepped if msg.get("type") == "events" and done else []:
                if ev is None or ev["lane"] not in done:
                    continue
                s = ev["lane"]
                done[s] += len(ev["finished"])
                if done[s] >= n and s not in finished_at:
                    finished_at[s] = time.monotonic() - t0
                entries = full_entries(ev["entries"])
                decode_only = not any(e[PHASE] == PREFILL for e in entries)
                steps[s].append({"ms": 1000 * (ev["t_end"] - ev["t_start"]), "decode": decode_only,
                                 "rows": len(entries)})
            if on_tick and time.monotonic() - last_tick > 1.0:
                last_tick = time.monotonic()
                on_tick()
        wall = time.monotonic() - t0
        return {"wall_s": wall, "strategies": {
            s: {"steps": len(steps[s]), "tokens": n * max_tokens, "wall_s": finished_at[s],
                "tokens_per_s": n * max_tokens / finished_at[s],
                "decode_step_ms_p50": p50([x["ms"] for x in steps[s] if x["decode"]]),
                "decode_rows_max": max((x["rows"] for x in steps[s] if x["decode"]), default=0),
                "step_ms_mean": statistics.fmean(x["ms"] for x in steps[s]) if steps[s] else None}
            for s in done}}


def p50(xs):
    return statistics.median(xs) if xs else None

