"""tab_trace's reading of a Chrome trace (the run itself needs chromium and the app: python -m
engine.harness.tab_trace)."""
from __future__ import annotations

import pytest

from engine.harness.tab_trace import FRAME, MAIN, TOP_LEVEL, frames_per_s, main_thread_ms, no_draw_js, render


def test_the_main_threads_slices_are_summed_by_name_per_second():
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": MAIN}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "Compositor"}}]
    slices = [{"ph": "X", "name": TOP_LEVEL, "pid": 1, "tid": 10, "ts": 0, "dur": 3000},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 10, "ts": 0, "dur": 1000},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 10, "ts": 5000, "dur": 500},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 11, "ts": 0, "dur": 9000},  # another thread's
              {"ph": "B", "name": "Layout", "pid": 1, "tid": 10, "ts": 0}]  # (not a complete slice)
    per_s, busy = main_thread_ms({"traceEvents": meta + slices}, seconds=2.0)
    assert per_s == [(TOP_LEVEL, 1.5), ("Commit", 0.75)]
    assert busy == 3.0 / 1e3 / 2.0
    assert main_thread_ms(meta + slices, 2.0) == (per_s, busy)  # a bare list of events too
    text = render({"busy_share": busy, "seconds": 2.0, "frames_per_s": 12.5, "ms_per_s": dict(per_s),
                   "at_end": {"fps": 12, "frame_ms": 6.1}, "in_sight": {"timeline": False, "kv": True, "text": True}})
    assert "busy 0% of 2 s, 12.5 animation frames a second" in text and "0.8  Commit" in text
    assert "the views' own count in the last second: 12 frames, 6.1 ms each" in text
    assert "in sight at the end: kv, text" in text


def test_the_main_threads_animation_frames_are_counted_per_second():
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": MAIN}}]
    frames = [{"ph": "X", "name": FRAME, "pid": 1, "tid": 10, "ts": 40_000 * i, "dur": 9000} for i in range(6)]
    others = [{"ph": "X", "name": FRAME, "pid": 2, "tid": 20, "ts": 0, "dur": 9000},  # another tab's renderer
              {"ph": "B", "name": FRAME, "pid": 1, "tid": 10, "ts": 0}]  # (not a complete slice)
    assert frames_per_s({"traceEvents": meta + frames + others}, seconds=0.25) == 24.0


def test_modules_named_to_draw_nothing_become_a_script_and_nothing_else_does():
    assert no_draw_js("Slots, UtilView") == "Slots.draw = () => {};UtilView.draw = () => {};"
    assert no_draw_js("") == ""
    with pytest.raises(ValueError, match="--no-draw"):
        no_draw_js("Slots;alert(1)")
