"""Where the app's own core goes, by thread: each thread's CPU time while a load runs, named by py-spy.

The engines share the app's core (and its interpreter lock) with the server's event loop (the sockets,
HTTP, Streamlit's messages) and the page sessions' script threads, so what open tabs cost the engines is
what those other threads run. A step-time ratio on a shared 2-core machine drifts by tens of percent
between rounds; CPU seconds by thread say which part of the app took the time. Each thread's CPU comes
from /proc (polled, so a thread that ends is counted up to its last poll); py-spy, which samples the app
from outside without stopping it, names the Python threads. py-spy is not a dependency of the app (`pip
install py-spy`). Linux only.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

POLL_S = 0.1
GROUPS = ("engines", "native", "server", "sessions", "short-lived", "other")
_THREAD = re.compile(r"^thread \((\d+)\): ?(.*)$")


def group_of(thread_name: str | None) -> str:
    """engines (a lane's thread, its core-share helpers), native (no Python thread: torch's intra-op pool),
    server (the event loop: sockets, HTTP, Streamlit's messages), sessions (a page's script run, the
    threads it hands work to), or other."""
    if thread_name is None:
        return "native"
    if thread_name.startswith("inflight-"):
        return "engines"
    if thread_name == "MainThread":
        return "server"
    if thread_name.startswith(("ScriptRunner", "AnyIO worker")):
        return "sessions"
    return "other"


def thread_names(raw: str) -> dict[int, str]:
    """Thread id -> name from py-spy's raw output (a line a stack: `thread (id): name;frame;... count`)."""
    out = {}
    for line in raw.splitlines():
        m = _THREAD.match(line.split(";", 1)[0])
        if m:
            out[int(m.group(1))] = m.group(2).strip()
    return out


def cpu_s(stat: str) -> float:
    """user + system seconds from a /proc stat line."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share_of_core(first: dict[int, float], last: dict[int, float], total_s: float, names: dict[int, str],
                  wall_s: float) -> dict[str, float]:
    """Each group's CPU as a percent of one core; short-lived: what threads that began and ended between two
    polls ran (the process's total less every polled thread's)."""
    used: Counter = Counter()
    for tid, end in last.items():
        used[group_of(names.get(tid))] += end - first.get(tid, 0.0)
    used["short-lived"] = max(0.0, total_s - sum(used.values()))
    return {g: 100 * used.get(g, 0.0) / max(wall_s, 1e-9) for g in GROUPS}


class ThreadSpy:
    """Polls process `pid`'s threads' CPU and runs py-spy on it while the block runs; share_of_core()
    afterwards."""

    def __init__(self, pid: int):
        if shutil.which("py-spy") is None:
            raise SystemExit("--spy needs py-spy: pip install py-spy")
        self.pid = pid
        self._out = Path(tempfile.mkdtemp(prefix="thread-spy-")) / "raw.txt"
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._halt = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True, name="thread-spy")

    def __enter__(self) -> ThreadSpy:
        self._proc = subprocess.Popen(
            ["py-spy", "record", "--pid", str(self.pid), "--nonblocking", "--threads", "--format", "raw",
             "--rate", "20", "--output", str(self._out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._total0 = cpu_s(Path(f"/proc/{self.pid}/stat").read_text())
        self._t0 = time.monotonic()
        self._read_threads(at_start=True)
        self._poller.start()
        return self

    def _read_threads(self, at_start: bool = False) -> None:
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                used = cpu_s((task / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue  # (it ended)
            self._first.setdefault(int(task.name), used if at_start else 0.0)  # (one born since: all of it)
            self._last[int(task.name)] = used

    def _poll(self) -> None:
        while not self._halt.wait(POLL_S):
            self._read_threads()

    def __exit__(self, *exc) -> None:
        self._halt.set()
        self._poller.join()
        self._read_threads()
        self.wall_s = time.monotonic() - self._t0
        self.total_s = cpu_s(Path(f"/proc/{self.pid}/stat").read_text()) - self._total0
        self._proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self.names = thread_names(self._out.read_text()) if self._out.exists() else {}

    def share_of_core(self) -> dict[str, float]:
        return share_of_core(self._first, self._last, self.total_s, self.names, self.wall_s)
