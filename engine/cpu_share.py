"""CPU cores for lanes that step side by side in one process.

On the CPU, PyTorch runs a forward's operators on an OpenMP team that belongs to the calling thread, and
MKL and oneDNN size theirs the same way. Two lanes stepping at once on 2 cores then run 4 threads that
spin-wait on each other: a batch-8 decode step took 2.2x as long beside another lane as alone, worse
than taking turns. So each lane's thread sizes its own team to its share of the cores (the cores divided
by the lanes stepping now, at least 1) before each step, through OpenMP's per-thread setting
(omp_set_num_threads in that thread). torch.set_num_threads is process-wide and cannot do this.
A lane alone keeps every core. INFLIGHT_CPU_SHARE=0 turns the sharing off.
"""
from __future__ import annotations

import ctypes
import logging
import os
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
    """Which lanes are stepping, and each one's share of the cores."""

    def __init__(self, cores: int | None = None, enabled: bool | None = None):
        self.cores = cores or torch.get_num_threads()
        self.enabled = os.environ.get("INFLIGHT_CPU_SHARE", "1") != "0" if enabled is None else enabled
        self._busy: set[object] = set()  # the lanes' workers stepping now
        self._lock = threading.Lock()
        self._set = _omp_set_num_threads()
        self._mine = threading.local()
        if self._set is None:
            log.info("no OpenMP runtime found: lanes stepping together share the cores as the OS schedules them")

    def stepping(self, lane: object) -> int:
        """The calling lane thread is about to step: size its team to its share; returns the share."""
        with self._lock:
            self._busy.add(lane)
            share = max(1, self.cores // len(self._busy)) if self.enabled else self.cores
        self._team(share)
        return share

    def whole(self) -> None:
        """Give the calling thread every core until its lane's next step (to measure the device)."""
        self._team(self.cores)

    def _team(self, threads: int) -> None:
        if self._set is not None and getattr(self._mine, "threads", None) != threads:
            # torch sizes a thread's team once, at its first parallel op, to torch.set_num_threads's
            # value: let that happen first, or it would undo this setting later
            torch.get_num_threads()
            self._set(threads)
            self._mine.threads = threads

    def resting(self, lane: object) -> None:
        """The lane has nothing to compute now: the others may take its cores at their next step."""
        with self._lock:
            self._busy.discard(lane)


SHARE = CoreShare()  # one per process: the cores are the process's
