"""Where a long-running server's Python memory goes: tracemalloc snapshots, compared with one taken once
the server has warmed up, written as JSON every so often (the soak's --heap-report).

Each report holds the Python heap now and at its peak, and the source lines whose allocations grew most
since the baseline (size, count). It sees what Python allocates (events, buffers, dicts, strings), not
what torch or other native code allocates: an RSS that grows while this stays flat points there. Beside
it, glibc's own count (mallinfo2, every arena): bytes malloc has handed out and not had back, bytes freed
but kept in its arenas, and bytes in mmapped chunks; with the RSS, they tell a leak (in use grows) from
memory freed but kept (free grows). And the torch tensors alive (their storages, each counted once, by
dtype and shape): native memory that grows with them is held by Python objects, memory that grows
without them is torch's or its libraries' own (caches, threads).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

FRAMES = 6   # of each allocation's traceback, kept (more costs memory and time)
TOP = 20     # lines reported


class HeapWatch(threading.Thread):
    def __init__(self, report: str, every_s: float = 60.0, baseline_after_s: float = 60.0):
        super().__init__(daemon=True, name="heap-watch")
        self.report, self.every_s, self.baseline_after_s = Path(report), every_s, baseline_after_s
        self.samples: list[dict] = []
        self.halt = threading.Event()

    def run(self) -> None:
        tracemalloc.start(FRAMES)
        try:
            self._watch(time.monotonic())
        finally:
            tracemalloc.stop()  # halted: the process runs at full speed again

    def _watch(self, t0: float) -> None:
        if self.halt.wait(self.baseline_after_s):
            return
        baseline = tracemalloc.take_snapshot()
        while not self.halt.wait(self.every_s):
            self.samples.append(self._sample(baseline, time.monotonic() - t0))
            self._write()

    @staticmethod
    def _sample(baseline, elapsed: float) -> dict:
        current, peak = tracemalloc.get_traced_memory()
        grown = tracemalloc.take_snapshot().compare_to(baseline, "traceback")
        return {"t_s": round(elapsed, 1), "python_mb": round(current / 2**20, 1), "python_peak_mb": round(peak / 2**20, 1),
                **native_memory(), **tensor_census(),
                "grown": [{"kb": round(d.size_diff / 1024, 1), "count": d.count_diff,
                           "where": [f"{f.filename}:{f.lineno}" for f in d.traceback]}
                          for d in grown[:TOP] if d.size_diff > 0]}

    def _write(self) -> None:
        part = self.report.with_suffix(".part")
        part.write_text(json.dumps({"samples": self.samples}, indent=1))
        part.replace(self.report)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def native_memory() -> dict:
    """The process's RSS and glibc's count over all arenas (MB); only the RSS where glibc has no mallinfo2."""
    out = {"rss_mb": None}
    try:
        with open("/proc/self/status") as f:
            out["rss_mb"] = next(round(int(line.split()[1]) / 1024, 1) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        pass
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallinfo2"):
        return out
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    mb = lambda n: round(n / 2**20, 1)  # noqa: E731
    return {**out, "malloc_in_use_mb": mb(m.uordblks), "malloc_free_kept_mb": mb(m.fordblks),
            "malloc_mmapped_mb": mb(m.hblkhd)}


def tensor_census(top: int = 8) -> dict:
    """The CPU tensors alive: their storages' MB (each storage once), and the largest groups by dtype and
    shape. Empty where torch was never imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    seen, by_kind = set(), Counter()
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor) or obj.device.type != "cpu":  # (no __instancecheck__ hooks)
            continue
        try:
            storage = obj.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except (NotImplementedError, RuntimeError):  # an opaque layout (oneDNN's packed weights): its size
            key, nbytes = id(obj), obj.numel() * obj.element_size()
        if key in seen:
            continue
        seen.add(key)
        by_kind[f"{str(obj.dtype).removeprefix('torch.')}{list(obj.shape)}"] += nbytes
    return {"tensors": len(seen), "tensor_mb": round(sum(by_kind.values()) / 2**20, 1),
            "tensor_top_mb": {k: round(v / 2**20, 1) for k, v in by_kind.most_common(top)}}
