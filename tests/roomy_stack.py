"""Run a call with a fresh, roomy chunk of CPython's frame stack under it (CPython without gh-142183's fix).

CPython 3.11 keeps Python frames in chunks of 16 KiB. A call that does not fit in the current chunk gets a new
one (an mmap), which is freed (a munmap) as soon as that call returns. A loop that sits just below a chunk's end
therefore maps and unmaps memory on every call it makes. pytest's own frames put the tests exactly there often
enough: the Triton interpreter's kernels ran 2.5x slower under pytest than in a script (918,755 munmap calls
against 55,468 for the same engine run). A frame of ROOM bytes cannot fit in any chunk but one made for it, twice
its size (a new chunk also holds 1,000 slots more than the frame that opens it): what it calls lives in the other
half, about ROOM bytes deep, and no chunk is freed until it returns. (The fix keeps one chunk for the next call: in
3.15, and backported to 3.13 and 3.14 in March 2026.)
"""
from __future__ import annotations

ROOM = 64 * 1024  # bytes of frames the call has before a chunk boundary: hundreds of frames deep
_SLOTS = ROOM // 8  # (a frame's slots are pointers)


def _make_runner():
    names = " = ".join(f"_{i}" for i in range(_SLOTS))
    source = f"def run(fn, *args):\n    if fn is None:\n        {names} = None\n    return fn(*args)\n"
    scope: dict = {}
    exec(compile(source, "<roomy_stack>", "exec"), scope)  # noqa: S102 - generated here, from constants only
    return scope["run"]


run_roomy = _make_runner()
run_roomy.__doc__ = "fn(*args), its frames in a fresh chunk with ROOM bytes for them (see the module's doc)."
