"""tests/roomy_stack.py: a loop of calls at any depth within ROOM never maps a new chunk of CPython's frame stack.
A fresh chunk's first page faults when the call writes its frame there, so a loop that crosses a chunk's end on
every call faults about once a call; one that stays within a chunk does not fault at all."""
from __future__ import annotations

import sys
import threading
import traceback

import pytest

from roomy_stack import ROOM, run_roomy

resource = pytest.importorskip("resource")
if not hasattr(resource, "RUSAGE_THREAD"):
    pytest.skip("counts a thread's page faults (Linux)", allow_module_level=True)

CALLS = 2_000
DEPTHS = 300  # descend up to this many of _descend's frames: more than a chunk of 16 KiB, within ROOM
HEADER_SLOTS = 10  # a frame's own fields, beside its locals and stack (8 in CPython 3.11)


def _callee(a, b):  # a larger frame than _descend's: some depth leaves room for _descend but not for it
    c = d = e = f = g = h = i = j = k = m = n = p = q = r = s = t = u = v = w = x = y = z = a
    return a + b + c + d + e + f + g + h + i + j + k + m + n + p + q + r + s + t + u + v + w + x + y + z


def _descend(depth: int) -> int:
    """At `depth` frames below here, the minor page faults of CALLS calls of _callee."""
    if depth:
        return _descend(depth - 1)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(CALLS):
        _callee(1, 2)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def _worst_depth() -> int:
    return max(_descend(d) for d in range(DEPTHS))


def _in_a_new_thread(fn):
    """fn() on a thread of its own: its frames start a stack of their own, whatever this test runs within."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_a_loop_at_any_depth_within_the_room_maps_nothing():
    code = _descend.__code__
    assert DEPTHS * 8 * (code.co_stacksize + code.co_nlocals + HEADER_SLOTS) < ROOM
    assert _in_a_new_thread(lambda: run_roomy(_worst_depth)) < CALLS // 10


def test_without_it_some_depth_maps_a_chunk_a_call():
    """The premise, where CPython has no cache of one chunk (gh-142183: 3.13 and later may have one)."""
    if sys.version_info >= (3, 13):
        pytest.skip("this CPython may keep a chunk for the next call")
    assert _in_a_new_thread(_worst_depth) >= CALLS // 2


def test_it_returns_what_the_call_returns_and_raises_what_it_raises():
    assert run_roomy(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        run_roomy(divmod, 1, 0)


def test_the_suite_runs_within_the_room():
    """tests/conftest.py's pytest_runtestloop: this test's frames are below run_roomy's."""
    assert "<roomy_stack>" in {f.filename for f in traceback.extract_stack()}
