"""`streamlit run app.py` (or another Streamlit script) as a child process, for measurements and browser tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

from ..paths import REPO

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def stop_process(proc, grace_s: float) -> None:
    """Ask it to stop; kill it if it has not within grace_s."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_set(spec: str | None) -> set[int] | None:
    """A --cpus value ("0", "0,1") as the set of CPUs; None for none given."""
    return {int(c) for c in spec.split(",")} if spec else None


@contextmanager
def on_cpus(cpus: str | None):
    """This process on `cpus` while the block runs (playwright's driver, started in it, starts chromium: both
    inherit them), its own cores back after."""
    if not cpus:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpu_set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


@contextmanager
def running_app(port: int, env: dict | None = None, log=None, timeout: float = 300, cpus: set[int] | None = None,
                script: str = "app.py", flags: tuple[str, ...] = ()):
    """Start the app (or another Streamlit script, relative to the repository, with more of Streamlit's
    flags) on 127.0.0.1:port (on the given CPUs only, if any), wait until it answers, yield its URL, stop it."""
    out = log if log is not None else subprocess.DEVNULL
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true",
                             "--server.port", str(port), *flags], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL, preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, timeout)
        yield url
    finally:
        stop_process(proc, 15)


def _wait_healthy(url: str, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")
