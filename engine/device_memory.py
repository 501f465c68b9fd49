"""How much memory a KV pool may take: an upper bound from what the device has free right now.

A pool larger than this would push the machine into swap (CPU) or fail half way (GPU), taking the
other lanes and the server down with it; refusing it up front, naming both numbers, is kinder.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
import traceback
from collections.abc import Callable

import torch

from .gc_pauses import collect_dropped, freeze_long_lived

GiB = 1 << 30
USABLE_SHARE = 0.8  # of what is free: the rest is left for activations, the tokenizer, the browser...


def device_name(device: torch.device) -> str:
    """A device by name, cuda as cuda:N (the current device where no index is given): equal names, one device."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def free_bytes(device: torch.device) -> int | None:
    """Memory free on the device now (CPU: MemAvailable), or None where it cannot be read."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# Held while a lane captures CUDA graphs (engine/model/decode_graphs.py): emptying the allocator's
# cache, or a collection freeing another engine's graphs, must not happen in the middle of a capture.
CUDA_CAPTURE_LOCK = threading.Lock()


def release_freed_memory(dropped: Callable[[], object | None] | None = None) -> None:
    """Hand memory freed by a dropped engine (`dropped`: a weak reference to it) back to the system. glibc
    keeps freed blocks of this size (a pool is tens of MB per layer) in its arenas, so without a trim the
    process keeps the high-water mark of every reconfigure (a 30-minute soak grew 3.1 GB -> 5.4 GB that way)."""
    with CUDA_CAPTURE_LOCK:
        collect_dropped(dropped)
        _hand_back()


def frames_cleared(error: BaseException) -> BaseException:
    """error, with the local variables of every frame it and the errors behind it went through dropped: a
    failed engine build's error would otherwise keep the engine and its memory (KV pools) alive."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    return error


def release_replaced_weights() -> None:
    """Weights replaced at load (packed, fused) are freed by reference counting, no collection needed; hand
    their memory back as release_freed_memory does (on a GPU the allocator's cached blocks are not reused by
    tensors of another size, and the KV pool's sizing reads what the device has free)."""
    with CUDA_CAPTURE_LOCK:
        _hand_back()


def _hand_back() -> None:
    """malloc's free pages, and the CUDA allocator's cached blocks, back to the system (under CUDA_CAPTURE_LOCK)."""
    trim_malloc()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def freeze_loaded_engine() -> None:
    """A lane's engine is loaded: what exists now lives long (engine/gc_pauses.py), frozen outside any
    CUDA graph capture (its collection must not free another engine's graphs mid-capture)."""
    with CUDA_CAPTURE_LOCK:
        freeze_long_lived()


def trim_malloc() -> None:
    """Give the pages of blocks freed by reference counting back to the system (no collection: a full
    one costs 0.2 s or more in a large process, and freed weights need none)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


_LIBC = _libc()


def check_kv_fits(nbytes: int, device: torch.device, what: str = "the KV pool",
                  fix: str = "lower kv_cache_memory_gb or num_kv_blocks", reclaimed: int = 0) -> None:
    """Raise ValueError if a KV pool of nbytes would not fit in USABLE_SHARE of the free memory (and of
    `reclaimed` bytes, a pool given back before this one is made); the message starts with `what` and ends
    with `fix` (the settings that size that pool)."""
    free = free_bytes(device)
    if free is None:
        return
    free += reclaimed
    bound = int(free * USABLE_SHARE)
    if nbytes > bound:
        given_back = f", the lane's {reclaimed / GiB:.2f} GiB pool given back" if reclaimed else ""
        raise ValueError(
            f"{what} would take {nbytes / GiB:.2f} GiB, but at most {bound / GiB:.2f} GiB can be used on "
            f"{device.type} ({USABLE_SHARE:.0%} of the {free / GiB:.2f} GiB free now{given_back}); {fix}")
