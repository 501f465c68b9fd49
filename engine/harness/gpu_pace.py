"""A GPU's pace on this CPU: what the socket, recordings and views face when the engines step every few
milliseconds with hundreds of rows (issue #42), measured without a GPU.

On an H100 a lane steps every 3-10 ms with up to 256 rows over a pool of hundreds of thousands of KV
blocks; on this CPU the default model steps every 50 ms or more. So the app runs here on a model whose
forward costs next to nothing: the SmolLM2 preset's architecture cut to one layer of width 32 over a
vocabulary of 512, with random weights (engine/model/files/random_model.py). Everything else is the
real thing: the scheduler, the paged KV cache (NUM_BLOCKS blocks a lane), sampling, detokenizing, the
step events, the hub, the socket, the recorder and the views. The service's slow motion caps each lane's
step rate where it would otherwise run faster. Its tokens mean nothing (random weights); every timing
is this machine's, and every figure says so.

`SocketMeter` is one more client of /engine/ws, subscribed as the live view is: what a tab receives
(bytes and messages a second: the messages' text, and what the network carried, frames deflated where
the server and the client agreed to), and what a recording of it would take (its events gzipped, as the
recorder writes them).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from ..model.files.model_files import models_cache_root
from ..wire_json import dumps
from ..model.files.random_model import build_random_model

PRESET = "SmolLM2-135M-Instruct"
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 512}
NUM_BLOCKS = 131_072  # a lane's pool: 2M tokens of 16-token blocks (128 bytes a token at this width: 256 MiB)
BATCHED_TOKENS = 4096  # a step's token budget: admissions chunk their prompts into it


def pace_model() -> Path:
    """The tiny random model's folder (built once into the user's cache)."""
    out = models_cache_root() / f"gpu-pace-{hashlib.sha1(json.dumps(TINY, sort_keys=True).encode()).hexdigest()[:8]}"
    if not (out / "config.json").exists():
        build_random_model(PRESET, out, overrides=TINY)
    return out


def lanes_file(path: Path, rows: int, num_blocks: int = NUM_BLOCKS) -> Path:
    """Two lanes of `rows` rows each over `num_blocks` blocks: continuous batching beside static."""
    common = {"max_num_seqs": rows, "num_kv_blocks": num_blocks, "block_size": 16,
              "max_num_batched_tokens": BATCHED_TOKENS, "cuda_graphs": False}
    lanes = {"continuous": {**common, "strategy": "continuous"},
             "static": {**common, "strategy": "static", "static_batch_size": rows}}
    path.write_text(json.dumps(lanes, indent=1))
    return path


def check_full_batches(requests: int, rows: int) -> None:
    """A GPU-pace load is whole batches of the static lane (it runs full batches): else SystemExit, saying so."""
    if requests % rows:
        raise SystemExit(f"--requests must be a multiple of --rows ({rows}): the static lane runs full batches")


def app_env(workdir: Path, rows: int, num_blocks: int = NUM_BLOCKS) -> dict[str, str]:
    """What the app's environment needs for lanes at a GPU's pace."""
    return {"INFLIGHT_MODEL": str(pace_model()), "INFLIGHT_DEVICE": "cpu", "INFLIGHT_DTYPE": "float32",
            "INFLIGHT_LANES": str(lanes_file(workdir / "gpu_pace_lanes.json", rows, num_blocks))}


class _CountingSocket(socket.socket):
    """A TCP socket that counts the bytes it receives: the websocket's frames as the network carried them."""
    received = 0

    def recv(self, size: int, *flags) -> bytes:
        data = super().recv(size, *flags)
        self.received += len(data)
        return data


class SocketMeter:
    """A client of /engine/ws subscribed as a live view tab is (every lane, every request's text, the KV),
    offering per-message deflate as a browser does, counting what it receives while it runs."""

    def __init__(self, url: str):
        self.url = url
        self.bytes = 0  # the messages' text
        self.deflate: str | None = None  # the compression the server agreed to (None: frames as text)
        self.messages = 0
        self.steps = 0
        self.key_frames = 0
        self.raw = 0  # the events' JSON lines, as a recording holds them before compression
        self.busy: list = []  # (time, text bytes, network bytes, steps) at the first and latest message with steps
        self._gz = io.BytesIO()
        self._zip = gzip.GzipFile(fileobj=self._gz, mode="wb")
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="socket-meter")
        self.t0 = self.t1 = None

    def __enter__(self) -> SocketMeter:
        from websockets.sync.client import connect
        where = urlsplit(self.url)
        self._sock = _CountingSocket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.connect((where.hostname, where.port))
        self._conn = connect(self.url, sock=self._sock, max_size=None, compression="deflate")
        self._ws = self._conn.__enter__()
        self.deflate = self._ws.response.headers.get("Sec-WebSocket-Extensions")
        self._ws.recv()  # hello
        self._ws.send(json.dumps({"cmd": "subscribe", "ref": "meter", "lanes": None, "requests": None, "kv": True}))
        while json.loads(self._ws.recv(timeout=30)).get("ref") != "meter":  # subscribed before any load
            pass
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                text = self._ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - the app went away: stop counting
                return
            self.bytes += len(text.encode())
            self.messages += 1
            if text.startswith('{"type":"events"'):
                steps = self.steps
                for ev in json.loads(text)["events"]:
                    line = dumps(ev).encode() + b"\n"  # (as the recorder encodes it, less its time)
                    self.raw += len(line)
                    self._zip.write(line)
                    if ev.get("type") == "step":
                        self.steps += 1
                        self.key_frames += "block_tables" in (ev.get("kv") or {})
                if self.steps > steps:
                    now = (time.monotonic(), self.bytes, self._sock.received, self.steps)
                    self.busy[1 if self.busy else 0:] = [now]

    def __exit__(self, *exc) -> None:
        self.t1 = time.monotonic()
        self._halt.set()
        self._thread.join()
        self._conn.__exit__(None, None, None)
        self._zip.close()

    def figures(self) -> dict:
        """Per second of the run: the messages' text and what the network carried (from the connection's
        start, its handshake included), messages; a minute's recording (its events as lines, as the bound on a
        recording counts them, and gzipped, as its file holds them)."""
        s = max(1e-9, (self.t1 or time.monotonic()) - self.t0)
        out = {"socket_kb_per_s": self.bytes / 1024 / s, "wire_kb_per_s": self._sock.received / 1024 / s,
               "deflate": self.deflate, "socket_messages_per_s": self.messages / s,
               "steps_per_s": self.steps / s, "key_frames": self.key_frames,
               "recording_mb_per_min": self.raw / 2 ** 20 / s * 60,
               "recording_gzip_mb_per_min": len(self._gz.getvalue()) / 2 ** 20 / s * 60}
        return out | self._busy_figures()

    def _busy_figures(self) -> dict:
        """The same rates from the first message with steps to the last (the meter's life also holds the
        time before the load and after it)."""
        if len(self.busy) < 2 or self.busy[1][0] <= self.busy[0][0]:
            return {"busy_s": 0.0}
        (t0, b0, w0, n0), (t1, b1, w1, n1) = self.busy
        s = t1 - t0
        return {"busy_s": s, "busy_socket_kb_per_s": (b1 - b0) / 1024 / s, "busy_wire_kb_per_s": (w1 - w0) / 1024 / s,
                "busy_steps_per_s": (n1 - n0) / s}
