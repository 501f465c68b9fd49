"""CPU cores for lanes that step side by side in one process.

On the CPU, PyTorch runs a forward's operators on an OpenMP team that belongs to the calling thread, and
MKL and oneDNN size theirs the same way. Two lanes stepping at once on 2 cores then run 4 threads that
spin-wait on each other: a batch-8 decode step took 1.8-2x as long beside another lane as alone
(sharing off in `python -m engine.bench.lanes_together`, docs/room.md), no better than taking turns. So each lane steps on its share of the cores: the cores divided by the lanes
stepping now, at least 1; a lane alone gets every core. INFLIGHT_CPU_SHARE=0 turns the sharing off. A
lane of two engines stepping at once (engine/disaggregated.py) counts once: each of its halves gets its
fraction of the lane's share; where that is less than a core, they take turns, so that the lane never
runs more threads than its share (two lanes on 2 cores: one core each, whichever they are made of).

Where a step runs matters as much as its team size. GNU OpenMP keeps a team's idle workers parked per
thread that ever led a team, and once the parked workers of all threads outnumber the cores, every
team stops spin-waiting between operators and sleeps instead: a lane alone in the app
stepped at 79-80 ms where the same batch-8 decode step takes 53 ms on a helper (`python -m
engine.bench.lanes_together`, docs/room.md). So lane threads themselves only ever run 1-thread teams;
a step with a larger share runs on a helper thread that leads a team of exactly that size, and the
helper exits (its workers with it) when the lane's share changes to another size or the lane rests. A
lane gets more than one core only while the lanes stepping are fewer than the cores, so the parked
workers add up to at most the cores (but for a moment when the shares change).
"""
from __future__ import annotations

import ctypes
import logging
import os
import queue
import sys
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)


def _omp_set_num_threads():
    """omp_set_num_threads of the OpenMP runtime torch uses, or None if it cannot be found."""
    try:
        return ctypes.CDLL(None).omp_set_num_threads  # already in the process's global symbols
    except (AttributeError, OSError):
        pass
    for path in _loaded_openmp_libraries():
        try:
            return ctypes.CDLL(path).omp_set_num_threads
        except (AttributeError, OSError):
            continue
    return None


def _loaded_openmp_libraries() -> list[str]:
    """Paths of the OpenMP runtimes loaded (Linux: from the process map; elsewhere torch's own)."""
    names = ("libgomp", "libiomp", "libomp")
    maps = Path(f"/proc/{os.getpid()}/maps")
    if maps.exists():
        paths = {p for p in maps.read_text().split() if p.startswith("/") and Path(p).name.startswith(names)}
        return sorted(paths)
    lib = Path(torch.__file__).parent / "lib"
    return sorted(str(p) for p in lib.glob("*") if p.name.startswith(names)) if sys.platform != "win32" else []


class CoreShare:
    """Which lanes are stepping, each one's share of the cores, and the threads their steps run on."""

    def __init__(self, cores: int | None = None, enabled: bool | None = None):
        self.cores = cores or torch.get_num_threads()
        self.enabled = os.environ.get("INFLIGHT_CPU_SHARE", "1") != "0" if enabled is None else enabled
        self._busy: dict[object, object] = {}  # who is stepping now -> the lane it belongs to
        self._teams: dict[object, _TeamThread] = {}  # lane -> the helper its steps with share > 1 run on
        self._lock = threading.Lock()
        self._set = _omp_set_num_threads()
        if self._set is None:
            log.info("no OpenMP runtime found: lanes stepping together share the cores as the OS schedules them")

    def lane_thread(self) -> None:
        """Called first in a lane's thread: it never leads a team larger than 1 (see the module doc)."""
        self._team(1)

    def share(self, lane: object, group: object = None, fraction: float = 1.0) -> float:
        """The lane (or a part of the lane `group`) is about to step: its share of the cores (a part's may
        be less than one core)."""
        with self._lock:
            self._busy[lane] = lane if group is None else group
            lanes = len(set(self._busy.values()))
            return self.cores // lanes * fraction if self.enabled else self.cores

    def run(self, lane: object, fn, group: object = None, fraction: float = 1.0, turns=None):
        """Run fn (the lane's step) on the lane's share of the cores; returns what fn returns. A part of a
        lane (group: the lane) gets `fraction` of the lane's share; below one core, it holds `turns` (a
        lock of the lane's parts) while it steps."""
        share = self.share(lane, group, fraction)
        if share < 1 and turns is not None:
            with turns:
                return self._run(lane, fn, 1)
        return self._run(lane, fn, max(1, int(share)))

    def _run(self, lane: object, fn, threads: int):
        if threads == 1 or self._set is None:
            # a helper this lane keeps while it shares one core parks workers no other lane can have
            # now: no lane gets more than one core until this one rests (and its helper exits)
            return fn()
        helper = self._teams.get(lane)
        if helper is not None and helper.threads != threads:
            self._retire(lane)
            helper = None
        if helper is None:
            helper = self._teams[lane] = _TeamThread(threads, self._team)
        return helper.call(fn)

    def resting(self, lane: object) -> None:
        """The lane has nothing to compute now: the others may take its cores at their next step."""
        with self._lock:
            self._busy.pop(lane, None)
        self._retire(lane)

    def on_all_cores(self, fn):
        """Run fn on every core (measuring the device) from any thread, leaving no team behind."""
        if self._set is None:
            return fn()
        helper = _TeamThread(self.cores, self._team)
        try:
            return helper.call(fn)
        finally:
            helper.stop()

    def _retire(self, lane: object) -> None:
        helper = self._teams.pop(lane, None)
        if helper is not None:
            helper.stop()

    def _team(self, threads: int) -> None:
        """Size the calling thread's OpenMP team."""
        if self._set is not None:
            # torch sizes a thread's team once, at its first parallel op, to torch.set_num_threads's
            # value: let that happen first, or it would undo this setting later
            torch.get_num_threads()
            self._set(threads)


class _TeamThread:
    """A thread that leads an OpenMP team of `threads` and runs what it is given, one call at a time."""

    def __init__(self, threads: int, size_team):
        self.threads = threads
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, args=(size_team,), daemon=True,
                                        name=f"inflight-team-{threads}")
        self._thread.start()

    def call(self, fn):
        done = threading.Event()
        box: dict = {}
        self._jobs.put((fn, box, done))
        done.wait()
        if "error" in box:
            error = box.pop("error")
            try:
                raise error
            finally:
                del error  # no cycle through the traceback keeping a failed step's tensors
        return box["value"]

    def stop(self) -> None:
        """Let the thread exit (its parked team workers exit with it) and wait for it."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self, size_team) -> None:
        sized = False
        while (job := self._jobs.get()) is not None:
            fn, box, done = job
            try:
                if not sized:
                    size_team(self.threads)
                    sized = True
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            done.set()


CORES = CoreShare()  # one per process: the cores are the process's
