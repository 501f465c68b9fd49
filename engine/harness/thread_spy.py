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
        m = _THREAD.match(line.rpartition(" ")[0].split(";", 1)[0])  # (a stack may be the thread's line alone)
        if m:
            out[int(m.group(1))] = m.group(2).strip()
    return out


def stat_fields(stat: str) -> list[str]:
    """A /proc stat line's fields after the command's name (which may hold spaces): [0] state, [1] parent."""
    return stat.rsplit(")", 1)[1].split()


def cpu_s(stat: str) -> float:
    """user + system seconds from a /proc stat line."""
    fields = stat_fields(stat)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_ticks(stat: str) -> int:
    """When the thread began (clock ticks since boot) from its /proc stat line: with its id, which thread this
    is (an id can be reused once its thread has ended)."""
    return int(stat_fields(stat)[19])


def share_of_core(first: dict[tuple, float], last: dict[tuple, float], total_s: float, names: dict[int, str],
                  wall_s: float) -> dict[str, float]:
    """Each group's CPU as a percent of one core (first, last: (thread id, start) -> CPU seconds at its first
    and latest poll); short-lived: the process's total less every polled thread's, i.e. what threads ran
    after their last poll, mostly threads that began and ended between two polls (a page's fragment rerun)."""
    used: Counter = Counter()
    for thread, end in last.items():
        used[group_of(names.get(thread[0]))] += end - first.get(thread, 0.0)
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
        self._first: dict[tuple, float] = {}
        self._last: dict[tuple, float] = {}
        self._halt = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True, name="thread-spy")

    def __enter__(self) -> ThreadSpy:
        self._proc = subprocess.Popen(
            ["py-spy", "record", "--pid", str(self.pid), "--nonblocking", "--threads", "--format", "raw",
             "--rate", "20", "--output", str(self._out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._total0 = cpu_s(Path(f"/proc/{self.pid}/stat").read_text())
        self._t0 = time.monotonic()
        self._read_threads(at_start=True)
        self._poller.start()
        return self

    def _read_threads(self, at_start: bool = False) -> None:
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
                used, thread = cpu_s(stat), (int(task.name), start_ticks(stat))
            except (OSError, IndexError, ValueError):
                continue  # (it ended)
            self._first.setdefault(thread, used if at_start else 0.0)  # (one born since: all of it)
            self._last[thread] = used

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
            _, err = self._proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            err = b"it did not exit within 30 s of SIGINT"
        self.names = thread_names(self._out.read_text()) if self._out.exists() else {}
        if not self.names:  # every thread would count as torch's own
            raise RuntimeError(f"py-spy named no thread of process {self.pid} (it needs to ptrace the app: root, "
                               f"or kernel.yama.ptrace_scope 0): {err.decode(errors='replace')[-500:]}")

    def share_of_core(self) -> dict[str, float]:
        return share_of_core(self._first, self._last, self.total_s, self.names, self.wall_s)
