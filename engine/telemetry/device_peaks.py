"""The device's measured peaks: memory bandwidth and matmul throughput, for the roofline.

Measured by a short micro-benchmark the first time a device (and dtype, and CPU thread count) is
used, then cached on disk: `$XDG_CACHE_HOME/inflight/device_peaks.json` (else
`~/.cache/inflight/...`). Each entry says how it was measured. Best of several runs, because on a
shared machine other work only ever slows a run down.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch

from ..cpu_share import CORES

log = logging.getLogger(__name__)
REPEATS = 5
_LOCK = threading.Lock()
_MEMO: dict[str, DevicePeaks] = {}


@dataclass(frozen=True)
class DevicePeaks:
    device: str
    dtype: str
    bytes_per_s: float
    flops_per_s: float
    method: str
    measured_unix: float

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound here."""
        return self.flops_per_s / self.bytes_per_s


def peaks_file() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(os.path.expanduser(xdg)) if xdg else Path(os.path.expanduser("~")) / ".cache"
    return base / "inflight" / "device_peaks.json"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({CORES.cores} threads)"  # a lane's thread may run on fewer: see cpu_share


def cpu_model() -> str:
    """The CPU's model name, as the OS reports it (figures are named with it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_peaks(device, dtype: torch.dtype, path: Path | None = None, linear: str = "torch") -> DevicePeaks:
    """Cached peaks for this device, dtype and linear backend (EngineConfig.linear_backend, resolved:
    the matmul peak is the engine's own matmul's), measuring them on first use."""
    device = torch.device(device)
    key = f"{device_name(device)} | {dtype} | {linear} linear"
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
        path = path or peaks_file()
        cache = _read(path)
        if key in cache:
            peaks = DevicePeaks(**cache[key])
        else:
            if device.type == "cpu":  # a lane thread's own team is 1 thread: measure on every core
                peaks = CORES.on_all_cores(lambda: measure_peaks(device, dtype, linear))
            else:
                peaks = measure_peaks(device, dtype, linear)
            cache[key] = asdict(peaks)
            _write(path, cache)
        _MEMO[key] = peaks
        return peaks


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, cache: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # processes measuring at once do not clash
        tmp.write_text(json.dumps(cache, indent=2) + "\n")
        tmp.replace(path)
    except OSError as e:  # a read-only home: measured again next time
        log.warning("could not cache device peaks in %s: %s", path, e)


def measure_peaks(device: torch.device, dtype: torch.dtype, linear: str = "torch") -> DevicePeaks:
    cuda = device.type == "cuda"
    copy_mib, n = (512, 8192) if cuda else (128, 1024)
    seconds_copy = _best(_copier(device, copy_mib), device)
    seconds_mm = _best(_matmul(device, dtype, n, linear), device)
    how = " through oneDNN with the weight packed, as the engine's linear layers" if linear == "onednn" else ""
    method = (f"copy of a {copy_mib} MiB buffer (bytes read + written) and a {n}x{n} {dtype} matmul{how} "
              f"(2n^3 FLOPs), best of {REPEATS} after a warm-up, torch {torch.__version__}")
    return DevicePeaks(device=device_name(device), dtype=str(dtype),
                       bytes_per_s=2 * copy_mib * 2**20 / seconds_copy, flops_per_s=2 * n**3 / seconds_mm,
                       method=method, measured_unix=time.time())


def _best(run, device: torch.device) -> float:
    """Seconds of the fastest of REPEATS calls of run()."""
    run()  # warm-up (allocation, kernel selection)
    best = float("inf")
    for _ in range(REPEATS):
        _sync(device)
        t0 = time.perf_counter()
        run()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copier(device: torch.device, mib: int):
    src = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _matmul(device: torch.device, dtype: torch.dtype, n: int, linear: str):
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    if linear == "onednn":
        from ..model.packed_linear import PackedLinear
        return partial(PackedLinear(b), a)
    return partial(torch.mm, a, b)
